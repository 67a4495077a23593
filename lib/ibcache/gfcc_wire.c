/* gfcc rpc2 codec and xprt's UDP extensions (gfcc_wire.h): explicit
 * little-endian (gfarm's x86-64 host order), every field checked. */
#include <endian.h>
#include <errno.h>
#include <string.h>

#include "ibcache/gfcc_wire.h"

#include "core/bytes.h"

#define VER_CMP	5	/* strlen("gfcc1"): what gfarm compares */

static void put_ver(uint8_t *p, const char *v)
{
	memset(p, 0, 8);
	memcpy(p, v, strlen(v));
}

enum gfcc_kind gfcc_kind(const void *buf, size_t len)
{
	if (!buf || len < 8)
		return GFCC_KIND_NONE;
	if (memcmp(buf, GFCC_RPC2_VER, VER_CMP) == 0)
		return GFCC_KIND_REQ;
	if (memcmp(buf, GFCC_X_MAGIC, 4) == 0)
		return GFCC_KIND_X;
	return GFCC_KIND_NONE;
}

/* --- limits ------------------------------------------------------------ */

bool gfcc_psize_ok(uint32_t psize)
{
	return psize >= GFCC_PSIZE_MIN && psize <= GFCC_PSIZE_MAX && !(psize & (psize - 1));
}

uint32_t gfcc_max_pages(uint32_t psize)
{
	uint32_t n;

	if (!gfcc_psize_ok(psize))
		return 0;
	n = GFCC_MAX_BYTES / psize;
	return n < GFCC_PAGES_MAX ? n : GFCC_PAGES_MAX;
}

/* IB: a send WR whose qkey has the high bit set uses the sending QP's own
 * qkey instead; 0 is what an unset field reads as. */
bool gfcc_qkey_ok(uint32_t qkey)
{
	return qkey != 0 && !(qkey & 0x80000000u);
}

size_t gfcc_req_len(uint32_t npblk, bool ext)
{
	return GFCC_REQ_HDR + (size_t)npblk * GFCC_PBLK_LEN + (ext ? GFCC_REQ_EXT_LEN : 0);
}

uint32_t gfcc_req_max_pblk(uint32_t mtu, bool ext)
{
	size_t fixed = gfcc_req_len(0, ext);
	uint32_t n;

	if (mtu < fixed + GFCC_PBLK_LEN)
		return 0;
	n = (uint32_t)((mtu - fixed) / GFCC_PBLK_LEN);
	return n < GFCC_PBLK_MAX ? n : GFCC_PBLK_MAX;
}

/* --- request ----------------------------------------------------------- */

int gfcc_req_set_pages(struct gfcc_req *q, const uint64_t *pages, uint32_t n, uint32_t max_pblk)
{
	uint32_t maxp = gfcc_max_pages(q->psize), taken = 0, nb = 0;

	if (!n || !maxp || !max_pblk)
		return -EINVAL;
	if (max_pblk > GFCC_PBLK_MAX)
		max_pblk = GFCC_PBLK_MAX;
	for (uint32_t i = 0; i < n && taken < maxp; i++) {
		if (i && pages[i] <= pages[i - 1])
			return -EINVAL;
		if (nb && pages[i] == q->pblk[nb - 1].index + q->pblk[nb - 1].count) {
			q->pblk[nb - 1].count++;
		} else {
			if (nb == max_pblk)
				break;
			q->pblk[nb].index = pages[i];
			q->pblk[nb].count = 1;
			nb++;
		}
		taken++;
	}
	q->npblk = nb;
	q->npage = taken;
	return (int)taken;
}

int gfcc_req_page(const struct gfcc_req *q, uint32_t i, uint64_t *index)
{
	uint64_t left = i;

	for (uint32_t b = 0; b < q->npblk && b < GFCC_PBLK_MAX; b++) {
		if (left < q->pblk[b].count) {
			*index = q->pblk[b].index + left;
			return 0;
		}
		left -= q->pblk[b].count;
	}
	return -ERANGE;
}

static int check_ext(const struct gfcc_req_ext *x)
{
	if (x->xver != GFCC_X_VERSION)
		return -EPROTONOSUPPORT;
	if (x->seglen < GFCC_SEGLEN_MIN || x->seglen > GFCC_SEGLEN_MAX)
		return -EINVAL;
	return 0;
}

int gfcc_req_check(const struct gfcc_req *q)
{
	uint32_t maxp = gfcc_max_pages(q->psize);
	uint64_t limit, end = 0, sum = 0;

	if (q->cmd != GFCC_CMD_READ_REQ)
		return -EPROTO;
	if (!gfcc_qkey_ok(q->qkey) || !maxp)
		return -EINVAL;
	if (q->obj.off < 0 || q->obj.len < 0 || q->obj.off > INT64_MAX - q->obj.len)
		return -EINVAL;
	/* gfarm's int fields: a negative count reads as huge here */
	if (!q->npblk || !q->npage || q->npblk > INT32_MAX || q->npage > INT32_MAX)
		return -EINVAL;
	if (q->npblk > GFCC_PBLK_MAX || q->npage > maxp)
		return -E2BIG;
	/* every page's byte offset must be a valid off_t */
	limit = (uint64_t)INT64_MAX / q->psize;
	for (uint32_t b = 0; b < q->npblk; b++) {
		const struct gfcc_pblk *p = &q->pblk[b];

		if (!p->count || p->count > limit || p->index > limit - p->count)
			return -EINVAL;
		if (b && p->index < end)
			return -EINVAL;	/* unsorted or overlapping */
		end = p->index + p->count;
		sum += p->count;
		if (sum > q->npage)
			return -EINVAL;
	}
	if (sum != q->npage)
		return -EINVAL;
	return q->has_ext ? check_ext(&q->ext) : 0;
}

int gfcc_req_encode(const struct gfcc_req *q, uint8_t *out, size_t cap)
{
	int e = gfcc_req_check(q);
	size_t len;
	uint8_t *p;

	if (e)
		return e;
	len = gfcc_req_len(q->npblk, q->has_ext);
	if (cap < len)
		return -ENOSPC;
	put_ver(out, GFCC_RPC2_VER);
	put_le64(out + 8, q->id);
	put_le64(out + 16, q->obj.ino);
	put_le64(out + 24, q->obj.gen);
	put_le64(out + 32, (uint64_t)q->obj.off);
	put_le64(out + 40, (uint64_t)q->obj.len);
	put_le32(out + 48, q->qkey);
	put_le32(out + 52, 0);	/* psn */
	put_le32(out + 56, q->cmd);
	put_le32(out + 60, q->psize);
	put_le32(out + 64, q->npage);
	put_le32(out + 68, q->npblk);
	p = out + GFCC_REQ_HDR;
	for (uint32_t b = 0; b < q->npblk; b++, p += GFCC_PBLK_LEN) {
		put_le64(p, q->pblk[b].index);
		put_le64(p + 8, q->pblk[b].count);
	}
	if (q->has_ext) {
		memcpy(p, GFCC_X_MAGIC, 4);
		p[4] = q->ext.xver;
		p[5] = 0;
		put_le16(p + 6, q->ext.seglen);
		put_le32(p + 8, q->ext.window);
		put_le32(p + 12, 0);
	}
	return (int)len;
}

int gfcc_req_decode(const void *buf, size_t len, struct gfcc_req *q)
{
	const uint8_t *b = buf, *p;
	size_t base;

	if (!b || len < GFCC_REQ_HDR)
		return -EMSGSIZE;
	if (memcmp(b, GFCC_RPC2_VER, VER_CMP) != 0)
		return -EPROTO;
	q->id = get_le64(b + 8);
	q->obj.ino = get_le64(b + 16);
	q->obj.gen = get_le64(b + 24);
	q->obj.off = (int64_t)get_le64(b + 32);
	q->obj.len = (int64_t)get_le64(b + 40);
	q->qkey = get_le32(b + 48);
	q->cmd = get_le32(b + 56);
	q->psize = get_le32(b + 60);
	q->npage = get_le32(b + 64);
	q->npblk = get_le32(b + 68);
	q->has_ext = false;
	memset(&q->ext, 0, sizeof(q->ext));
	/* the block count bounds what we read, so it is checked first */
	if (q->npblk == 0 || q->npblk > INT32_MAX)
		return -EINVAL;
	if (q->npblk > GFCC_PBLK_MAX)
		return -E2BIG;
	base = gfcc_req_len(q->npblk, false);
	if (len != base && len != base + GFCC_REQ_EXT_LEN)
		return -EMSGSIZE;
	p = b + GFCC_REQ_HDR;
	for (uint32_t i = 0; i < q->npblk; i++, p += GFCC_PBLK_LEN) {
		q->pblk[i].index = get_le64(p);
		q->pblk[i].count = get_le64(p + 8);
	}
	if (len > base) {
		if (memcmp(p, GFCC_X_MAGIC, 4) != 0)
			return -EPROTO;
		if (p[4] != GFCC_X_VERSION)
			return -EPROTONOSUPPORT;
		if (p[5] || get_le32(p + 12))
			return -EPROTO;
		q->has_ext = true;
		q->ext.xver = p[4];
		q->ext.seglen = get_le16(p + 6);
		q->ext.window = get_le32(p + 8);
	}
	return gfcc_req_check(q);
}

/* --- response ---------------------------------------------------------- */

int gfcc_res_check(const struct gfcc_res *r)
{
	if (r->err > GFCC_ERR_MAX || r->npage > INT32_MAX || r->nseg > INT32_MAX)
		return -EINVAL;
	if (r->npage > GFCC_PAGES_MAX)
		return -E2BIG;
	if (r->nseg > GFCC_SEG_MAX)
		return -E2BIG;
	if (!r->nseg)
		return -EINVAL;
	/* an error or an empty reply is the response alone (gfarm: nseg = 1
	 * when npage is 0) */
	if ((r->err || !r->npage) && (r->npage || r->nseg != 1))
		return -EINVAL;
	/* the size of a copy that answered: none with an error */
	if (r->has_size && (r->err || r->size > GFCC_RES_SIZE_MAX))
		return -EINVAL;
	return 0;
}

int gfcc_res_encode(const struct gfcc_res *r, uint8_t out[GFCC_RES_LEN])
{
	int e = gfcc_res_check(r);

	if (e)
		return e;
	put_ver(out, GFCC_RPC2_VER);
	put_le64(out + 8, r->id);
	put_le32(out + 16, r->err);
	put_le32(out + 20, r->npage);
	put_le32(out + 24, r->nseg);
	put_le32(out + 28, r->has_size ? (uint32_t)r->size : 0);
	if (r->has_size) {
		out[5] = GFCC_RES_F_SIZE;
		put_le16(out + 6, (uint16_t)(r->size >> 32));
	}
	return GFCC_RES_LEN;
}

int gfcc_res_decode(const void *buf, size_t len, struct gfcc_res *r)
{
	const uint8_t *b = buf;

	if (!b || len < GFCC_RES_LEN)
		return -EMSGSIZE;
	if (memcmp(b, GFCC_RPC2_VER, VER_CMP) != 0)
		return -EPROTO;
	r->id = get_le64(b + 8);
	r->err = get_le32(b + 16);
	r->npage = get_le32(b + 20);
	r->nseg = get_le32(b + 24);
	/* anything but the flag (an older responder's 0, gfarm's unfilled
	 * bytes) tells nothing, and the rest is ignored as it always was */
	r->has_size = b[5] == GFCC_RES_F_SIZE;
	r->size = r->has_size ? (uint64_t)get_le16(b + 6) << 32 | get_le32(b + 28) : 0;
	return gfcc_res_check(r);
}

/* --- data-segment header ----------------------------------------------- */

static int dseg_check(const struct gfcc_dseg *d)
{
	if (!gfcc_qkey_ok(d->qkey))
		return -EINVAL;
	if (d->npage > GFCC_PAGES_MAX)
		return -E2BIG;
	if (d->seg >= GFCC_SEG_MAX)
		return -ERANGE;
	return 0;
}

int gfcc_dseg_encode(const struct gfcc_dseg *d, uint8_t out[GFCC_DSEG_LEN])
{
	int e = dseg_check(d);

	if (e)
		return e;
	put_le64(out, d->id);
	put_le32(out + 8, d->qkey);
	put_le16(out + 12, d->seg);
	put_le16(out + 14, d->npage);
	return GFCC_DSEG_LEN;
}

int gfcc_dseg_decode(const void *buf, size_t len, struct gfcc_dseg *d)
{
	const uint8_t *b = buf;

	if (!b || len < GFCC_DSEG_LEN)
		return -EMSGSIZE;
	d->id = get_le64(b);
	d->qkey = get_le32(b + 8);
	d->seg = get_le16(b + 12);
	d->npage = get_le16(b + 14);
	return dseg_check(d);
}

/* --- control message --------------------------------------------------- */

size_t gfcc_xmsg_len(uint16_t nbits)
{
	return GFCC_X_HDR + ((size_t)nbits + 7) / 8;
}

int gfcc_xmsg_check(const struct gfcc_xmsg *m)
{
	size_t nb;
	bool any = false;

	if (m->type < GFCC_X_CREDIT || m->type > GFCC_X_FIN)
		return -EPROTO;
	if (!gfcc_qkey_ok(m->qkey))
		return -EINVAL;
	if (m->type != GFCC_X_RESEND)
		return m->base || m->nbits ? -EINVAL : 0;
	if (!m->nbits)
		return -EINVAL;
	if (m->nbits > GFCC_X_BITS_MAX)
		return -E2BIG;
	if ((uint32_t)m->base + m->nbits > GFCC_SEG_MAX)
		return -ERANGE;
	nb = ((size_t)m->nbits + 7) / 8;
	for (size_t i = 0; i < nb; i++)
		any |= m->bitmap[i] != 0;
	/* bits past nbits would name segments nobody asked for */
	if (m->nbits % 8 && m->bitmap[nb - 1] >> (m->nbits % 8))
		return -EINVAL;
	return any ? 0 : -EINVAL;
}

int gfcc_xmsg_encode(const struct gfcc_xmsg *m, uint8_t *out, size_t cap)
{
	int e = gfcc_xmsg_check(m);
	size_t len;

	if (e)
		return e;
	len = gfcc_xmsg_len(m->nbits);
	if (cap < len)
		return -ENOSPC;
	put_ver(out, GFCC_X_MAGIC "1");
	put_le64(out + 8, m->id);
	put_le32(out + 16, m->qkey);
	put_le32(out + 20, m->allow);
	out[24] = m->type;
	out[25] = 0;
	put_le16(out + 26, m->base);
	put_le16(out + 28, m->nbits);
	put_le16(out + 30, 0);
	memcpy(out + GFCC_X_HDR, m->bitmap, len - GFCC_X_HDR);
	return (int)len;
}

int gfcc_xmsg_decode(const void *buf, size_t len, struct gfcc_xmsg *m)
{
	static const uint8_t ver[8] = { 'g', 'f', 'c', 'x', '0' + GFCC_X_VERSION };
	const uint8_t *b = buf;

	if (!b || len < GFCC_X_HDR)
		return -EMSGSIZE;
	if (memcmp(b, GFCC_X_MAGIC, 4) != 0)
		return -EPROTO;
	if (memcmp(b, ver, 8) != 0)
		return b[4] != ver[4] ? -EPROTONOSUPPORT : -EPROTO;
	m->id = get_le64(b + 8);
	m->qkey = get_le32(b + 16);
	m->allow = get_le32(b + 20);
	m->type = b[24];
	m->base = get_le16(b + 26);
	m->nbits = get_le16(b + 28);
	if (b[25] || get_le16(b + 30))
		return -EPROTO;
	if (m->nbits > GFCC_X_BITS_MAX)
		return -E2BIG;
	if (len != gfcc_xmsg_len(m->nbits))
		return -EMSGSIZE;
	memset(m->bitmap, 0, sizeof(m->bitmap));
	memcpy(m->bitmap, b + GFCC_X_HDR, len - GFCC_X_HDR);
	return gfcc_xmsg_check(m);
}
