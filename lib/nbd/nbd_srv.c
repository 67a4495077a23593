/* NBD server protocol core (nbd_srv.h): the handshake state machine, the
 * request checks and the reply header.  Rules cite the NBD protocol
 * document's sections ("Fixed newstyle negotiation", "Option types",
 * "Request message", "Error values"). */
#include "nbd/nbd_srv.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/bytes.h"

#define OPT_HDR 16u		/* IHAVEOPT, option, length */
#define REP_HDR 20u		/* magic, option, reply type, length */
/* Room an option needs in the output before we take it: an INFO/GO
 * answer carrying the export's name and description, or one error. */
#define OPT_ROOM (2u * NBD_NAME_MAX + 512u)

/* the longest answer: INFO/GO with a name and a description of
 * NBD_NAME_MAX bytes each, four INFO replies and the ACK */
_Static_assert(5 * REP_HDR + 12 + 2 * (2 + NBD_NAME_MAX) + 14 <= OPT_ROOM, "OPT_ROOM holds it");
_Static_assert(NBD_SRV_OUTBUF >= OPT_ROOM, "an empty output takes any option");

static void fail(struct nbd_srv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct nbd_srv *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->why, sizeof(s->why), fmt, ap);
	va_end(ap);
	s->phase = NBD_PH_DONE;
}

static uint8_t *put(struct nbd_srv *s, size_t n)
{
	uint8_t *p = s->out + s->outlen;

	s->outlen += n;
	return p;
}

/* One option reply: its header and len bytes of data (copied from data,
 * or left for the caller to fill in when data is NULL). */
static uint8_t *reply(struct nbd_srv *s, uint32_t opt, uint32_t type, const void *data,
		      size_t len)
{
	uint8_t *p = put(s, REP_HDR + len);

	put_be64(p, NBD_REP_MAGIC);
	put_be32(p + 8, opt);
	put_be32(p + 12, type);
	put_be32(p + 16, (uint32_t)len);
	if (data && len)
		memcpy(p + REP_HDR, data, len);
	return p + REP_HDR;
}

/* An error reply with its message (proto.md: "a UTF-8 string the client
 * may show"). */
static void reply_err(struct nbd_srv *s, uint32_t opt, uint32_t type, const char *msg)
{
	reply(s, opt, type, msg, strlen(msg));
}

void nbd_srv_init(struct nbd_srv *s, const struct nbd_export *exp, bool transmission)
{
	uint8_t *p;

	s->exp = exp;
	s->fixed = s->no_zeroes = false;
	s->skip = 0;
	s->skip_opt = 0;
	s->too_big = false;
	s->outlen = 0;
	s->why[0] = 0;
	if (transmission) {
		s->phase = NBD_PH_TRANSMISSION;
		return;
	}
	s->phase = NBD_PH_CLIENT_FLAGS;
	p = put(s, 18);
	put_be64(p, NBD_MAGIC);
	put_be64(p + 8, NBD_IHAVEOPT);
	put_be16(p + 16, NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
}

void nbd_srv_sent(struct nbd_srv *s, size_t n)
{
	if (n >= s->outlen) {
		s->outlen = 0;
		return;
	}
	memmove(s->out, s->out + n, s->outlen - n);
	s->outlen -= n;
}

static bool name_ok(const struct nbd_export *e, const uint8_t *name, size_t len)
{
	/* the empty name asks for the default export: ours is the only one */
	return len == 0 || (strlen(e->name) == len && memcmp(e->name, name, len) == 0);
}

static uint16_t tflags(const struct nbd_export *e)
{
	return (uint16_t)(e->tflags | NBD_FLAG_HAS_FLAGS);
}

/* INFO and GO: {be32 namelen, name, be16 n, n * be16 info type}.  The
 * answer: NBD_INFO_EXPORT always, NAME and DESCRIPTION when asked for,
 * BLOCK_SIZE always (a server with constraints may send it unasked, and
 * every client we know honours it), then ACK. */
static enum nbd_ev opt_info(struct nbd_srv *s, uint32_t opt, const uint8_t *d, uint32_t len)
{
	const struct nbd_export *e = s->exp;
	uint32_t namelen;
	uint16_t nreq;
	bool want_name = false, want_desc = false;
	uint8_t *p;

	if (len < 6 || (namelen = get_be32(d)) > len - 6 ||
	    (nreq = get_be16(d + 4 + namelen), len != 6 + namelen + 2u * nreq)) {
		reply_err(s, opt, NBD_REP_ERR_INVALID, "malformed INFO/GO request");
		return NBD_EV_OPT;
	}
	if (!name_ok(e, d + 4, namelen)) {
		reply_err(s, opt, NBD_REP_ERR_UNKNOWN, "no such export");
		return NBD_EV_OPT;
	}
	for (uint16_t i = 0; i < nreq; i++) {
		uint16_t t = get_be16(d + 6 + namelen + 2u * i);

		want_name |= t == NBD_INFO_NAME;
		want_desc |= t == NBD_INFO_DESCRIPTION;
	}
	p = reply(s, opt, NBD_REP_INFO, NULL, 12);
	put_be16(p, NBD_INFO_EXPORT);
	put_be64(p + 2, e->size);
	put_be16(p + 10, tflags(e));
	if (want_name) {
		size_t l = strlen(e->name);

		p = reply(s, opt, NBD_REP_INFO, NULL, 2 + l);
		put_be16(p, NBD_INFO_NAME);
		memcpy(p + 2, e->name, l);
	}
	if (want_desc && e->description) {
		size_t l = strlen(e->description);

		p = reply(s, opt, NBD_REP_INFO, NULL, 2 + l);
		put_be16(p, NBD_INFO_DESCRIPTION);
		memcpy(p + 2, e->description, l);
	}
	p = reply(s, opt, NBD_REP_INFO, NULL, 14);
	put_be16(p, NBD_INFO_BLOCK_SIZE);
	put_be32(p + 2, e->min_block);
	put_be32(p + 6, e->pref_block);
	put_be32(p + 10, e->max_block);
	reply(s, opt, NBD_REP_ACK, NULL, 0);
	if (opt == NBD_OPT_GO) {
		s->phase = NBD_PH_TRANSMISSION;
		return NBD_EV_READY;
	}
	return NBD_EV_OPT;
}

/* One whole option (header and data in p). */
static enum nbd_ev option(struct nbd_srv *s, uint32_t opt, const uint8_t *d, uint32_t len)
{
	const struct nbd_export *e = s->exp;
	uint8_t *p;

	switch (opt) {
	case NBD_OPT_EXPORT_NAME:
		/* no way to refuse but to hang up ("Option types") */
		if (!name_ok(e, d, len)) {
			fail(s, "client asked for an export we do not have (%u-byte name)", len);
			return NBD_EV_ERROR;
		}
		p = put(s, s->no_zeroes ? 10 : 134);
		put_be64(p, e->size);
		put_be16(p + 8, tflags(e));
		if (!s->no_zeroes)
			memset(p + 10, 0, 124);
		s->phase = NBD_PH_TRANSMISSION;
		return NBD_EV_READY;
	case NBD_OPT_ABORT:
		if (s->fixed)
			reply(s, opt, NBD_REP_ACK, NULL, 0);
		s->phase = NBD_PH_DONE;
		return NBD_EV_CLOSE;
	case NBD_OPT_LIST:
		if (len) {
			reply_err(s, opt, NBD_REP_ERR_INVALID, "LIST takes no data");
		} else {
			size_t l = strlen(e->name);

			p = reply(s, opt, NBD_REP_SERVER, NULL, 4 + l);
			put_be32(p, (uint32_t)l);
			memcpy(p + 4, e->name, l);
			reply(s, opt, NBD_REP_ACK, NULL, 0);
		}
		return NBD_EV_OPT;
	case NBD_OPT_INFO:
	case NBD_OPT_GO:
		return opt_info(s, opt, d, len);
	case NBD_OPT_STARTTLS:
		reply_err(s, opt, NBD_REP_ERR_UNSUP, "TLS is not supported");
		return NBD_EV_OPT;
	default:
		/* structured replies, meta contexts, extended headers: simple
		 * replies only */
		reply_err(s, opt, NBD_REP_ERR_UNSUP, "option not supported");
		return NBD_EV_OPT;
	}
}

static size_t options(struct nbd_srv *s, const uint8_t *p, size_t n, enum nbd_ev *ev)
{
	size_t used = 0;
	uint32_t opt, len;

	if (s->skip) {
		used = s->skip < n ? s->skip : n;
		s->skip -= (uint32_t)used;
		if (s->skip) {
			*ev = NBD_EV_MORE;
			return used;
		}
	}
	if (NBD_SRV_OUTBUF - s->outlen < OPT_ROOM) {
		*ev = NBD_EV_BLOCKED;
		return used;
	}
	if (s->too_big) {
		/* the whole option is dropped: the refusal is owed now */
		reply_err(s, s->skip_opt, NBD_REP_ERR_TOO_BIG, "option data too long");
		s->too_big = false;
		*ev = NBD_EV_OPT;
		return used;
	}
	if (n < OPT_HDR) {
		*ev = NBD_EV_MORE;
		return 0;
	}
	if (get_be64(p) != NBD_IHAVEOPT) {
		fail(s, "bad option magic 0x%016llx", (unsigned long long)get_be64(p));
		*ev = NBD_EV_ERROR;
		return 0;
	}
	opt = get_be32(p + 8);
	len = get_be32(p + 12);
	if (!s->fixed && opt != NBD_OPT_EXPORT_NAME) {
		/* old newstyle: no way to say no but to hang up */
		fail(s, "option %u from a client without fixed newstyle", opt);
		*ev = NBD_EV_ERROR;
		return 0;
	}
	if (len > NBD_OPT_DATA_MAX) {
		if (opt == NBD_OPT_EXPORT_NAME) {
			fail(s, "export name of %u bytes", len);
			*ev = NBD_EV_ERROR;
			return 0;
		}
		s->skip = len;
		s->skip_opt = opt;
		s->too_big = true;
		*ev = NBD_EV_MORE;
		return OPT_HDR;
	}
	if (n - OPT_HDR < len) {
		*ev = NBD_EV_MORE;
		return 0;
	}
	*ev = option(s, opt, p + OPT_HDR, len);
	return OPT_HDR + len;
}

static uint32_t check_req(const struct nbd_export *e, const struct nbd_req *r)
{
	bool writes = r->type == NBD_CMD_WRITE || r->type == NBD_CMD_TRIM ||
		      r->type == NBD_CMD_WRITE_ZEROES;
	uint16_t allowed = NBD_CMD_FLAG_FUA;

	switch (r->type) {
	case NBD_CMD_READ:
	case NBD_CMD_WRITE:
	case NBD_CMD_FLUSH:
		break;
	case NBD_CMD_TRIM:
		if (!(e->tflags & NBD_FLAG_SEND_TRIM))
			return NBD_EINVAL;
		break;
	case NBD_CMD_WRITE_ZEROES:
		if (!(e->tflags & NBD_FLAG_SEND_WRITE_ZEROES))
			return NBD_EINVAL;
		allowed |= NBD_CMD_FLAG_NO_HOLE;
		break;
	default:	/* CACHE, BLOCK_STATUS (not offered), unknown */
		return NBD_EINVAL;
	}
	if (r->flags & ~allowed)
		return NBD_EINVAL;
	if (writes && (e->tflags & NBD_FLAG_READ_ONLY))
		return NBD_EPERM;
	if (r->type == NBD_CMD_FLUSH)
		return 0;	/* offset and length are reserved */
	if (!r->len || (r->type <= NBD_CMD_WRITE && r->len > e->max_block))
		return NBD_EINVAL;
	if (r->off > e->size || r->len > e->size - r->off)
		return r->type == NBD_CMD_WRITE || r->type == NBD_CMD_WRITE_ZEROES ? NBD_ENOSPC
										     : NBD_EINVAL;
	if ((r->off | r->len) & (e->min_block - 1))
		return NBD_EINVAL;
	return 0;
}

static size_t transmission(struct nbd_srv *s, const uint8_t *p, size_t n, enum nbd_ev *ev,
			   struct nbd_req *r)
{
	if (n < NBD_REQ_LEN) {
		*ev = NBD_EV_MORE;
		return 0;
	}
	if (get_be32(p) != NBD_REQUEST_MAGIC) {
		fail(s, "bad request magic 0x%08x", get_be32(p));
		*ev = NBD_EV_ERROR;
		return 0;
	}
	r->flags = get_be16(p + 4);
	r->type = get_be16(p + 6);
	r->cookie = get_be64(p + 8);
	r->off = get_be64(p + 16);
	r->len = get_be32(p + 24);
	r->payload = r->type == NBD_CMD_WRITE ? r->len : 0;
	if (r->type == NBD_CMD_DISC) {
		s->phase = NBD_PH_DONE;
		*ev = NBD_EV_DISC;
		return NBD_REQ_LEN;
	}
	r->err = check_req(s->exp, r);
	*ev = NBD_EV_REQ;
	return NBD_REQ_LEN;
}

size_t nbd_srv_input(struct nbd_srv *s, const uint8_t *p, size_t n, enum nbd_ev *ev,
		     struct nbd_req *req)
{
	uint32_t cf;

	switch (s->phase) {
	case NBD_PH_CLIENT_FLAGS:
		if (n < 4) {
			*ev = NBD_EV_MORE;
			return 0;
		}
		cf = get_be32(p);
		/* "the server MUST close the connection" on a flag it does
		 * not know */
		if (cf & ~(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES)) {
			fail(s, "unknown client flags 0x%08x", cf);
			*ev = NBD_EV_ERROR;
			return 0;
		}
		s->fixed = cf & NBD_FLAG_C_FIXED_NEWSTYLE;
		s->no_zeroes = cf & NBD_FLAG_C_NO_ZEROES;
		s->phase = NBD_PH_OPTIONS;
		*ev = NBD_EV_OPT;
		return 4;
	case NBD_PH_OPTIONS:
		return options(s, p, n, ev);
	case NBD_PH_TRANSMISSION:
		return transmission(s, p, n, ev, req);
	case NBD_PH_DONE:
		break;
	}
	if (!s->why[0])
		snprintf(s->why, sizeof(s->why), "input after the end of the conversation");
	*ev = NBD_EV_ERROR;
	return 0;
}

void nbd_reply_hdr(uint8_t out[NBD_REPLY_LEN], uint32_t err, uint64_t cookie)
{
	put_be32(out, NBD_SIMPLE_REPLY_MAGIC);
	put_be32(out + 4, err);
	put_be64(out + 8, cookie);
}

void nbd_req_encode(uint8_t out[NBD_REQ_LEN], uint16_t flags, uint16_t type, uint64_t cookie,
		    uint64_t off, uint32_t len)
{
	put_be32(out, NBD_REQUEST_MAGIC);
	put_be16(out + 4, flags);
	put_be16(out + 6, type);
	put_be64(out + 8, cookie);
	put_be64(out + 16, off);
	put_be32(out + 24, len);
}

uint32_t nbd_errno(int err)
{
	switch (err < 0 ? -err : err) {
	case 0:
		return 0;
	case EPERM:
	case EROFS:
	case EACCES:
		return NBD_EPERM;
	case ENOMEM:
		return NBD_ENOMEM;
	case EINVAL:
		return NBD_EINVAL;
	case ENOSPC:
	case EFBIG:
	case EDQUOT:
		return NBD_ENOSPC;
	case EOVERFLOW:
		return NBD_EOVERFLOW;
	case EOPNOTSUPP:
		return NBD_ENOTSUP;
	case ESHUTDOWN:
		return NBD_ESHUTDOWN;
	default:
		return NBD_EIO;
	}
}

const char *nbd_cmd_name(unsigned type)
{
	static const char *const names[] = {
		"read", "write", "disc", "flush", "trim", "cache", "write-zeroes", "block-status",
	};

	return type < sizeof(names) / sizeof(names[0]) ? names[type] : "unknown";
}
