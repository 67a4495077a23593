#include "shmcm/shmcm_wire.h"

#include <string.h>

#include "core/bytes.h"

int shmcm_decode(const void *buf, size_t len, uint32_t mru, struct shmcm_pkt *p)
{
	const uint8_t *b = buf;

	if (len < SHMCM_MHDR_LEN)
		return SHMCM_ETRUNC;
	p->type = get_be32(b);
	p->size = get_be32(b + 4);
	/* LINX allocates mhdr.size bytes straight from shared memory; we
	 * bound it by what is readable and by what we agreed to receive. */
	if (p->size > mru)
		return SHMCM_EMRU;
	if (p->size > len)
		return SHMCM_ETRUNC;

	switch (p->type) {
	case SHMCM_CON_PKT:
		if (p->size != SHMCM_CON_LEN)
			return SHMCM_ESIZE;
		p->con.type = get_be32(b + 8);
		p->con.cno = get_be16(b + 12);
		p->con.spare = get_be16(b + 14);
		if (p->con.type < SHMCM_CON_REQ || p->con.type > SHMCM_CON_FIN)
			return SHMCM_ETYPE;
		p->data = NULL;
		p->data_len = 0;
		return SHMCM_OK;
	case SHMCM_UDATA_1_PKT:
		if (p->size < SHMCM_UDATA_HLEN)
			return SHMCM_ESIZE;
		p->u.cno = get_be16(b + 8);
		p->u.msgid = get_be16(b + 10);
		p->u.src = get_be32(b + 12);
		p->u.dst = get_be32(b + 16);
		p->u.size = get_be32(b + 20);
		p->u.addr = get_be64(b + 24);
		p->data = b + SHMCM_UDATA_HLEN;
		p->data_len = p->size - SHMCM_UDATA_HLEN;
		if (p->data_len > p->u.size)
			return SHMCM_EFRAG;
		return SHMCM_OK;
	default:
		return SHMCM_ETYPE;
	}
}

const char *shmcm_decode_strerror(int err)
{
	switch (err) {
	case SHMCM_OK: return "ok";
	case SHMCM_ETRUNC: return "truncated packet";
	case SHMCM_EMRU: return "packet larger than the MRU";
	case SHMCM_ETYPE: return "unknown packet type";
	case SHMCM_ESIZE: return "packet size does not match its type";
	case SHMCM_EFRAG: return "fragment larger than its message";
	}
	return "unknown error";
}

size_t shmcm_encode_con(void *buf, uint32_t con_type, uint16_t cno)
{
	uint8_t *b = buf;

	put_be32(b, SHMCM_CON_PKT);
	put_be32(b + 4, SHMCM_CON_LEN);
	put_be32(b + 8, con_type);
	put_be16(b + 12, cno);
	put_be16(b + 14, 0);
	return SHMCM_CON_LEN;
}

size_t shmcm_encode_udata_hdr(void *buf, uint32_t pkt_size, uint16_t cno,
			      uint16_t msgid, uint32_t src, uint32_t dst,
			      uint32_t msg_size)
{
	uint8_t *b = buf;

	put_be32(b, SHMCM_UDATA_1_PKT);
	put_be32(b + 4, pkt_size);
	put_be16(b + 8, cno);
	put_be16(b + 10, msgid);
	put_be32(b + 12, src);
	put_be32(b + 16, dst);
	put_be32(b + 20, msg_size);
	memset(b + 24, 0, 8);
	return SHMCM_UDATA_HLEN;
}

size_t shmcm_encode_udata_ref(void *buf, uint16_t cno, uint16_t msgid, uint32_t src,
			      uint32_t dst, uint32_t msg_size, uint64_t addr)
{
	uint8_t *b = buf;

	shmcm_encode_udata_hdr(buf, SHMCM_UDATA_HLEN, cno, msgid, src, dst, msg_size);
	put_be64(b + 24, addr);
	return SHMCM_UDATA_HLEN;
}

const char *shmcm_con_type_name(uint32_t con_type)
{
	static const char *const names[] = {
		[SHMCM_CON_REQ] = "CON_REQ", [SHMCM_CON_ACK] = "CON_ACK",
		[SHMCM_CON_RST] = "CON_RST", [SHMCM_CON_ALV] = "CON_ALV",
		[SHMCM_CON_FIN] = "CON_FIN",
	};

	if (con_type >= SHMCM_CON_REQ && con_type <= SHMCM_CON_FIN)
		return names[con_type];
	return "CON_?";
}
