/* Frame header codec (port_wire.h): explicit big-endian, every field checked. */
#include "port/port_wire.h"
#include "core/bytes.h"
#include "core/cc.h"

#include <string.h>

XHOT_INLINE unsigned pw_size_for_len(uint64_t len)
{
	/* ceil(log2(len + 8)), at least PW_MIN_SIZE, at most 63 */
	unsigned s;

	if (len > (1ull << 63) - 8)
		return 63;
	s = 64u - (unsigned)__builtin_clzll(len + 7);
	return s < PW_MIN_SIZE ? PW_MIN_SIZE : s;
}

XHOT_INLINE void pw_encode(uint8_t *b, const struct pw_hdr *h)
{
	b[0] = h->type;
	b[1] = h->flags;
	b[2] = h->prio;
	b[3] = h->arg;
	put_be16(b + 4, h->src_port);
	put_be16(b + 6, h->dst_port);
	put_be32(b + 8, h->seq);
	put_be32(b + 12, h->len);
	put_be32(b + 16, h->off);
	put_be32(b + 20, h->aux);
}

XINLINE int check_data(const struct pw_hdr *h, uint64_t plen)
{
	if (h->arg < PW_MIN_SIZE || h->arg > PW_MAX_SIZE || h->arg != pw_size_for_len(h->len))
		return PW_E_SIZE;
	/* 64-bit sums: a hostile off + len cannot wrap */
	if ((uint64_t)h->off + plen > h->len)
		return PW_E_BOUNDS;
	if ((h->flags & PW_FIRST) && h->off != 0)
		return PW_E_BOUNDS;
	if ((h->flags & PW_LAST) && (uint64_t)h->off + plen != h->len)
		return PW_E_BOUNDS;
	/* An empty fragment only as a whole empty message. */
	if (!plen && h->len && !(h->flags & PW_FIRST && h->flags & PW_LAST))
		return PW_E_BOUNDS;
	if ((h->flags & PW_SYNC) && !(h->flags & PW_FIRST))
		return PW_E_FLAGS;
	if (h->aux && !(h->flags & PW_ACKS))
		return PW_E_RSVD;
	return 0;
}

XHOT_INLINE int pw_decode(const uint8_t *b, size_t flen, struct pw_hdr *h)
{
	uint64_t plen;

	if (!b || flen < PW_HDR_LEN)
		return PW_E_SHORT;
	plen = flen - PW_HDR_LEN;
	h->type = b[0];
	h->flags = b[1];
	h->prio = b[2];
	h->arg = b[3];
	h->src_port = get_be16(b + 4);
	h->dst_port = get_be16(b + 6);
	h->seq = get_be32(b + 8);
	h->len = get_be32(b + 12);
	h->off = get_be32(b + 16);
	h->aux = get_be32(b + 20);

	if (h->type < PW_DATA || h->type > PW_ABORT)
		return PW_E_TYPE;
	if (h->type != PW_DATA && h->flags)
		return PW_E_FLAGS;
	if (h->flags & ~PW_FLAGS_ALL)
		return PW_E_FLAGS;
	if (h->prio > 1)
		return PW_E_PRIO;
	if (h->type != PW_HELLO && (h->src_port >= PW_MAX_PORTS || h->dst_port >= PW_MAX_PORTS))
		return PW_E_PORT;
	switch (h->type) {
	case PW_DATA:
		return check_data(h, plen);
	case PW_NACK:
		if (h->arg < PW_NACK_NOBUF || h->arg > PW_NACK_REJECTED)
			return PW_E_REASON;
		/* fall through */
	case PW_ACK:
		if (plen)
			return PW_E_BOUNDS;
		if ((h->type == PW_ACK && h->arg) || h->len || h->off || h->aux)
			return PW_E_RSVD;
		return 0;
	case PW_ABORT:
		if (plen)
			return PW_E_BOUNDS;
		if (h->arg || h->len || h->off || h->aux)
			return PW_E_RSVD;
		return 0;
	case PW_HELLO:
		/* The version is checked by the caller, which can say which
		 * versions met; only the magic is ours to judge. */
		if (h->aux != PW_MAGIC)
			return PW_E_MAGIC;
		if (plen || h->src_port || h->dst_port || h->arg)
			return PW_E_RSVD;
		return 0;
	}
	return PW_E_TYPE;
}

const char *pw_strerror(int e)
{
	switch (e) {
	case 0: return "ok";
	case PW_E_SHORT: return "frame shorter than its header";
	case PW_E_TYPE: return "unknown frame type";
	case PW_E_FLAGS: return "bad flags";
	case PW_E_PRIO: return "bad priority";
	case PW_E_PORT: return "port id out of range";
	case PW_E_SIZE: return "size class does not match the length";
	case PW_E_BOUNDS: return "fragment outside its message";
	case PW_E_REASON: return "unknown NACK reason";
	case PW_E_MAGIC: return "not an xprt port peer (bad magic)";
	case PW_E_RSVD: return "reserved field not zero";
	}
	return "unknown error";
}

XHOT_INLINE size_t pw_pack_put(uint8_t *b, const uint8_t *hdr, const void *data, size_t dlen)
{
	put_be16(b, (uint16_t)(PW_HDR_LEN + dlen));
	memcpy(b + PW_PACK_LEN, hdr, PW_HDR_LEN);
	if (dlen)
		memcpy(b + PW_PACK_LEN + PW_HDR_LEN, data, dlen);
	return PW_PACK_LEN + PW_HDR_LEN + dlen;
}

XHOT_INLINE int pw_pack_next(const uint8_t *b, size_t len, size_t *off, const uint8_t **frame,
			     size_t *flen)
{
	size_t o = *off, n;

	if (o >= len)
		return 0;
	if (len - o < PW_PACK_LEN)
		return PW_E_SHORT;
	n = get_be16(b + o);
	o += PW_PACK_LEN;
	if (n < PW_HDR_LEN || n > len - o)
		return PW_E_SHORT;
	*frame = b + o;
	*flen = n;
	*off = o + n;
	return 1;
}
