/* tcp:// frame codec (xrc_tcp_wire.h): explicit big-endian fields at fixed
 * offsets; the decoder checks every field before anyone acts on it. */
#include "xprt/xrc_tcp_wire.h"

#include <errno.h>
#include <string.h>

#include "core/bytes.h"

size_t xtcp_hdr_len(uint8_t type)
{
	switch (type) {
	case XTCP_CONN_REQ:
	case XTCP_CONN_ACC:
	case XTCP_CONN_REJ:
	case XTCP_WRITE:
	case XTCP_READ_REQ:
		return 32;
	case XTCP_SEND:
	case XTCP_READ_RSP:
	case XTCP_ACK:
	case XTCP_NAK:
		return 16;
	default:
		return 0;
	}
}

static int decode_cm(const uint8_t *p, struct xtcp_frame *f)
{
	if (get_be32(p + 8) != XTCP_MAGIC)
		return XTCP_EMAGIC;
	f->version = get_be16(p + 12);
	/* A version-2 client talking to us gets dropped (or rejected by the
	 * application); negotiation down is left to the version that needs it. */
	if (f->version != XTCP_VERSION)
		return XTCP_EVERSION;
	if (get_be16(p + 14) || get_be32(p + 28))
		return XTCP_ERSVD;
	if (f->flags)
		return XTCP_EFLAGS;
	if (f->len > XRC_PRIV_MAX)
		return XTCP_ELEN;
	f->max_send = get_be32(p + 16);
	f->rq_depth = get_be32(p + 20);
	f->sq_depth = get_be32(p + 24);
	if (f->type == XTCP_CONN_REJ)
		return 0;
	if (!f->max_send || f->max_send > XTCP_MAX_SEND || !f->rq_depth ||
	    f->rq_depth > XTCP_MAX_DEPTH || !f->sq_depth || f->sq_depth > XTCP_MAX_DEPTH)
		return XTCP_ELIMIT;
	return 0;
}

int xtcp_decode(const uint8_t *p, size_t n, uint32_t max_send, struct xtcp_frame *f)
{
	size_t hl;
	int rc = 0;

	if (n < XTCP_PREFIX_LEN)
		return XTCP_EMORE;
	memset(f, 0, sizeof(*f));
	f->type = p[0];
	f->flags = p[1];
	f->len = get_be32(p + 4);
	hl = xtcp_hdr_len(f->type);
	if (!hl)
		return XTCP_ETYPE;
	if (get_be16(p + 2))
		return XTCP_ERSVD;
	if (n < hl)
		return XTCP_EMORE;

	switch (f->type) {
	case XTCP_CONN_REQ:
	case XTCP_CONN_ACC:
	case XTCP_CONN_REJ:
		rc = decode_cm(p, f);
		break;
	case XTCP_SEND:
		/* verbs has no send with both an immediate and an invalidation */
		if ((f->flags & ~(XTCP_F_IMM | XTCP_F_INV)) ||
		    f->flags == (XTCP_F_IMM | XTCP_F_INV))
			return XTCP_EFLAGS;
		f->inv_rkey = get_be32(p + 12);
		if (!(f->flags & XTCP_F_INV) && f->inv_rkey)
			return XTCP_ERSVD;
		/* The sender agreed to max_send in the handshake; a bigger
		 * SEND is a protocol error, never a reason to allocate. */
		if (f->len > max_send)
			return XTCP_ELEN;
		f->imm = get_be32(p + 8);
		break;
	case XTCP_WRITE:
		if (f->flags & ~XTCP_F_IMM)
			return XTCP_EFLAGS;
		if (get_be32(p + 28))
			return XTCP_ERSVD;
		if (f->len > XTCP_MAX_RDMA)
			return XTCP_ELEN;
		f->seq = get_be32(p + 8);
		f->rkey = get_be32(p + 12);
		f->raddr = get_be64(p + 16);
		f->imm = get_be32(p + 24);
		break;
	case XTCP_READ_REQ:
		if (f->flags)
			return XTCP_EFLAGS;
		if (get_be32(p + 28))
			return XTCP_ERSVD;
		f->seq = get_be32(p + 8);
		f->rkey = get_be32(p + 12);
		f->raddr = get_be64(p + 16);
		f->rlen = get_be32(p + 24);
		if (f->len || f->rlen > XTCP_MAX_RDMA)
			return XTCP_ELEN;
		break;
	case XTCP_READ_RSP:
	case XTCP_ACK:
	case XTCP_NAK:
		if (f->flags)
			return XTCP_EFLAGS;
		f->seq = get_be32(p + 8);
		f->status = get_be32(p + 12);
		if (f->len > (f->type == XTCP_READ_RSP ? XTCP_MAX_RDMA : 0))
			return XTCP_ELEN;
		if (f->type == XTCP_ACK && f->status)
			return XTCP_ERSVD;
		if (f->status > XTCP_ST_ACCESS || (f->type == XTCP_NAK && !f->status) ||
		    (f->status && f->len))
			return XTCP_ESTATUS;
		break;
	}
	return rc ? rc : (int)hl;
}

size_t xtcp_encode(uint8_t *p, const struct xtcp_frame *f)
{
	size_t hl = xtcp_hdr_len(f->type);

	memset(p, 0, XTCP_HDR_MAX);
	p[0] = f->type;
	p[1] = f->flags;
	put_be32(p + 4, f->len);
	switch (f->type) {
	case XTCP_CONN_REQ:
	case XTCP_CONN_ACC:
	case XTCP_CONN_REJ:
		put_be32(p + 8, XTCP_MAGIC);
		put_be16(p + 12, XTCP_VERSION);
		put_be32(p + 16, f->max_send);
		put_be32(p + 20, f->rq_depth);
		put_be32(p + 24, f->sq_depth);
		break;
	case XTCP_SEND:
		put_be32(p + 8, f->imm);
		put_be32(p + 12, f->inv_rkey);
		break;
	case XTCP_WRITE:
	case XTCP_READ_REQ:
		put_be32(p + 8, f->seq);
		put_be32(p + 12, f->rkey);
		put_be64(p + 16, f->raddr);
		put_be32(p + 24, f->type == XTCP_WRITE ? f->imm : f->rlen);
		break;
	default:
		put_be32(p + 8, f->seq);
		put_be32(p + 12, f->status);
		break;
	}
	return hl;
}

const char *xtcp_strerror(int e)
{
	switch (e) {
	case XTCP_EMORE: return "incomplete header";
	case XTCP_ETYPE: return "unknown frame type";
	case XTCP_EFLAGS: return "undefined flags";
	case XTCP_ERSVD: return "reserved bytes not zero";
	case XTCP_ELEN: return "length over the limit";
	case XTCP_EMAGIC: return "bad magic";
	case XTCP_EVERSION: return "unsupported version";
	case XTCP_ESTATUS: return "bad status";
	case XTCP_ELIMIT: return "limits out of range";
	default: return "?";
	}
}

int xtcp_status_errno(uint32_t st)
{
	return st == XTCP_ST_OK ? 0 : -EREMOTEIO;
}
