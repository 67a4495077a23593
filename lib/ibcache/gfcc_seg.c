/* gfcc reply segmentation and the requester's reassembler (gfcc_seg.h). */
#include <errno.h>
#include <string.h>

#include "ibcache/gfcc_seg.h"

uint32_t gfcc_seglen(uint32_t mtu, enum gfcc_flavour f)
{
	if (mtu < GFCC_MTU_MIN || mtu > GFCC_MTU_MAX)
		return 0;
	switch (f) {
	case GFCC_UD:
		return mtu <= 4096 ? mtu : 0;
	case GFCC_UD_GFARM:
		return mtu <= 4096 ? mtu - GFCC_GRH_LEN : 0;
	case GFCC_UDP:
		return mtu - GFCC_DSEG_LEN;
	}
	return 0;
}

int gfcc_layout_init(struct gfcc_layout *l, uint32_t psize, uint32_t npage, uint32_t seglen)
{
	if (!gfcc_psize_ok(psize) || seglen < GFCC_SEGLEN_MIN || seglen > GFCC_SEGLEN_MAX)
		return -EINVAL;
	if (npage > gfcc_max_pages(psize))
		return -E2BIG;
	l->psize = psize;
	l->npage = npage;
	l->seglen = seglen;
	/* npage * psize <= GFCC_MAX_BYTES: no overflow */
	l->total = GFCC_RES_LEN + npage * psize;
	l->nseg = (l->total + seglen - 1) / seglen;
	return 0;
}

uint32_t gfcc_seg_len(const struct gfcc_layout *l, uint32_t seg)
{
	if (seg >= l->nseg)
		return 0;
	if (seg + 1 < l->nseg)
		return l->seglen;
	return l->total - seg * l->seglen;
}

void gfcc_page_segs(const struct gfcc_layout *l, uint32_t page, uint32_t *first, uint32_t *last)
{
	uint32_t start = GFCC_RES_LEN + page * l->psize;

	*first = start / l->seglen;
	*last = (start + l->psize - 1) / l->seglen;
}

/* The page piece at stream position pos (>= the response), up to end. */
static void page_piece(const struct gfcc_layout *l, uint32_t pos, uint32_t end,
		       struct gfcc_piece *p)
{
	uint32_t o = pos - GFCC_RES_LEN, room;

	p->kind = GFCC_PC_PAGE;
	p->page = o / l->psize;
	p->off = o % l->psize;
	room = l->psize - p->off;
	p->len = end - pos < room ? end - pos : room;
}

int gfcc_seg_pieces(const struct gfcc_layout *l, uint32_t seg, enum gfcc_prefix pfx,
		    struct gfcc_piece *out, unsigned max)
{
	uint32_t pos, end;
	unsigned n = 0;

	if (seg >= l->nseg)
		return -ERANGE;
	pos = seg * l->seglen;
	end = pos + gfcc_seg_len(l, seg);
	if (pfx != GFCC_PFX_NONE) {
		if (n == max)
			return -ENOSPC;
		out[n++] = (struct gfcc_piece){
			.kind = pfx == GFCC_PFX_GRH ? GFCC_PC_GRH : GFCC_PC_DSEG,
			.len = pfx == GFCC_PFX_GRH ? GFCC_GRH_LEN : GFCC_DSEG_LEN,
		};
	}
	/* seglen >= 216 > 32: the response is whole in segment 0 (the first
	 * WR's first SGE, seed 3.2.2) */
	if (pos == 0) {
		if (n == max)
			return -ENOSPC;
		out[n++] = (struct gfcc_piece){ .kind = GFCC_PC_RES, .len = GFCC_RES_LEN };
		pos = GFCC_RES_LEN;
	}
	while (pos < end) {
		if (n == max)
			return -ENOSPC;
		page_piece(l, pos, end, &out[n]);
		pos += out[n++].len;
	}
	return (int)n;
}

/* --- reassembler --------------------------------------------------------- */

int gfcc_reasm_init(struct gfcc_reasm *r, const struct gfcc_reasm_cfg *c)
{
	int e;

	if (c->mode > GFCC_RA_PLACED || !gfcc_qkey_ok(c->qkey) || !c->npage)
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	if ((e = gfcc_layout_init(&r->lay, c->psize, c->npage, c->seglen)))
		return e;
	if (c->mode != GFCC_RA_PLACED) {
		if (!c->pages)
			return -EINVAL;
		for (uint32_t i = 0; i < c->npage; i++)
			if (!c->pages[i])
				return -EINVAL;
	}
	r->id = c->id;
	r->qkey = c->qkey;
	r->mode = c->mode;
	r->npage_req = c->npage;
	r->pages = c->pages;
	/* a short reply is a prefix of this layout: these counts hold for it */
	for (uint32_t p = 0; p < c->npage; p++) {
		uint32_t first, last;

		gfcc_page_segs(&r->lay, p, &first, &last);
		r->page_left[p] = (uint16_t)(last - first + 1);
	}
	return 0;
}

static bool seg_in(const struct gfcc_reasm *r, uint32_t seg)
{
	return r->segmap[seg / 64] >> (seg % 64) & 1;
}

/* Checks segment `seg` of a reply of `npage` pages against everything
 * known, then takes it.  res: the decoded response, for segment 0. */
static int accept(struct gfcc_reasm *r, uint32_t seg, uint32_t npage, const uint8_t *payload,
		  size_t plen, const struct gfcc_res *res)
{
	struct gfcc_layout lay;
	uint32_t pos, end;

	if (r->known) {
		if (npage != r->lay.npage)
			return -EBADMSG;
		lay = r->lay;
	} else {
		/* the responder may send fewer pages, never more (seed 3.3.4) */
		if (npage > r->npage_req)
			return -EBADMSG;
		gfcc_layout_init(&lay, r->lay.psize, npage, r->lay.seglen);
	}
	if (seg >= lay.nseg)
		return -ERANGE;
	if (plen != gfcc_seg_len(&lay, seg))
		return -EMSGSIZE;
	if (seg == 0) {
		if (res->id != r->id)
			return -EPROTO;
		if (res->npage != npage || res->nseg != lay.nseg)
			return -EBADMSG;
	}
	r->arrived++;
	if (seg_in(r, seg)) {
		r->dups++;
		return GFCC_RA_DUP;
	}

	r->lay = lay;
	r->known = true;
	if (seg == 0)
		r->res = *res;
	pos = seg * lay.seglen;
	end = pos + (uint32_t)plen;
	if (pos < GFCC_RES_LEN)
		pos = GFCC_RES_LEN;
	while (pos < end) {
		struct gfcc_piece p;

		page_piece(&lay, pos, end, &p);
		if (payload)
			memcpy(r->pages[p.page] + p.off, payload + (pos - seg * lay.seglen), p.len);
		if (--r->page_left[p.page] == 0)
			r->pages_ok++;
		pos += p.len;
	}
	r->segmap[seg / 64] |= 1ull << (seg % 64);
	if (++r->got < lay.nseg)
		return GFCC_RA_NEW;
	r->done = true;
	return GFCC_RA_DONE;
}

static int input(struct gfcc_reasm *r, const uint8_t *b, size_t len, bool placed,
		 const void *resbuf)
{
	struct gfcc_res res = { 0 };
	struct gfcc_dseg d;
	uint32_t seg, npage;
	int e;

	if (r->mode == GFCC_RA_UDP) {
		if (placed)
			return -EINVAL;
		if ((e = gfcc_dseg_decode(b, len, &d)))
			return e;
		if (d.id != r->id || d.qkey != r->qkey)
			return -EPROTO;
		b += GFCC_DSEG_LEN;
		len -= GFCC_DSEG_LEN;
		if (d.seg == 0 && (e = gfcc_res_decode(b, len, &res)))
			return e;
		return accept(r, d.seg, d.npage, b, len, &res);
	}
	if (placed != (r->mode == GFCC_RA_PLACED))
		return -EINVAL;
	if (r->done)
		return -EALREADY;
	/* UD: the QP fills its receive WRs in order, so the n-th arrival is
	 * segment n; segment 0 says how many pages the reply has */
	seg = r->next;
	if (seg == 0) {
		if (placed && !resbuf)
			return -EINVAL;
		if ((e = gfcc_res_decode(placed ? resbuf : b, placed ? GFCC_RES_LEN : len, &res)))
			return e;
		npage = res.npage;
	} else {
		npage = r->lay.npage;
	}
	e = accept(r, seg, npage, placed ? NULL : b, len, &res);
	if (e >= 0)
		r->next++;
	return e;
}

int gfcc_reasm_input(struct gfcc_reasm *r, const void *buf, size_t len)
{
	int e = buf ? input(r, buf, len, false, NULL) : -EMSGSIZE;

	if (e < 0)
		r->rejected++;
	return e;
}

int gfcc_reasm_input_hdr(struct gfcc_reasm *r, const void *hdr, size_t len, const void *res)
{
	struct gfcc_res rs = { 0 };
	struct gfcc_dseg d;
	int e;

	if (r->mode != GFCC_RA_UDP || !hdr)
		e = -EINVAL;
	else if ((e = gfcc_dseg_decode(hdr, len, &d)) != 0)
		;
	else if (d.id != r->id || d.qkey != r->qkey)
		e = -EPROTO;
	else if (d.seg == 0 && len < GFCC_DSEG_LEN + GFCC_RES_LEN)
		e = -EMSGSIZE;
	else if (d.seg == 0 && !res)
		e = -EINVAL;
	else if (d.seg == 0 && (e = gfcc_res_decode(res, GFCC_RES_LEN, &rs)) != 0)
		;
	else
		e = accept(r, d.seg, d.npage, NULL, len - GFCC_DSEG_LEN, &rs);
	if (e < 0)
		r->rejected++;
	return e;
}

int gfcc_reasm_placed(struct gfcc_reasm *r, size_t len, const void *res)
{
	int e = input(r, NULL, len, true, res);

	if (e < 0)
		r->rejected++;
	return e;
}

bool gfcc_reasm_page_ok(const struct gfcc_reasm *r, uint32_t i)
{
	if (!r->known || i >= r->lay.npage)
		return false;
	/* UD: positional scatter, trusted only whole (see gfcc_seg.h) */
	if (r->mode != GFCC_RA_UDP)
		return r->done;
	return r->page_left[i] == 0;
}

uint32_t gfcc_reasm_nmissing(const struct gfcc_reasm *r)
{
	return r->lay.nseg - r->got;
}

uint32_t gfcc_reasm_next_missing(const struct gfcc_reasm *r, uint32_t from)
{
	for (uint32_t s = from; s < r->lay.nseg;) {
		uint64_t w = ~r->segmap[s / 64] >> (s % 64);

		if (w) {
			s += (uint32_t)__builtin_ctzll(w);
			return s < r->lay.nseg ? s : UINT32_MAX;
		}
		s = (s / 64 + 1) * 64;
	}
	return UINT32_MAX;
}

uint32_t gfcc_reasm_resend(const struct gfcc_reasm *r, uint32_t from, uint32_t maxbits,
			   struct gfcc_xmsg *m)
{
	uint32_t base = gfcc_reasm_next_missing(r, from), n = 0, last = 0;

	if (base == UINT32_MAX || !maxbits)
		return 0;
	if (maxbits > GFCC_X_BITS_MAX)
		maxbits = GFCC_X_BITS_MAX;
	if (maxbits > r->lay.nseg - base)
		maxbits = r->lay.nseg - base;
	memset(m, 0, sizeof(*m));
	m->id = r->id;
	m->qkey = r->qkey;
	m->type = GFCC_X_RESEND;
	m->base = (uint16_t)base;
	for (uint32_t i = 0; i < maxbits; i++) {
		if (seg_in(r, base + i))
			continue;
		m->bitmap[i / 8] |= (uint8_t)(1u << (i % 8));
		last = i;
		n++;
	}
	m->nbits = (uint16_t)(last + 1);
	return n;
}
