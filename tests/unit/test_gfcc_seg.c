/* gfcc reply segmentation (every byte of every page exactly once, every
 * packet but the last full, for MTU 256..4096 with and without the GRH),
 * the UD receive-buffer layout, and the requester's reassembler: in order,
 * out of order, duplicates, losses reported exactly, short and error
 * replies, foreign and truncated datagrams. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ibcache/gfcc_seg.h"

static const uint32_t mtus[] = { 256, 512, 1024, 2048, 4096 };
static const enum gfcc_flavour flavours[] = { GFCC_UD, GFCC_UD_GFARM, GFCC_UDP };
static const uint32_t psizes[] = { 512, 1024, 4096, 8192, 65536 };

#define ID	0xfeedface12345678ull
#define QKEY	0x2badc0deu
#define NP	GFCC_PIECES_MAX(GFCC_SEGLEN_MAX, GFCC_PSIZE_MIN)

static uint8_t pat(uint32_t page, uint32_t off)
{
	return (uint8_t)(page * 131 + off * 7 + (off >> 8) + 1);
}

static void test_seglen(void **s)
{
	assert_int_equal(gfcc_seglen(2048, GFCC_UD), 2048);
	assert_int_equal(gfcc_seglen(2048, GFCC_UD_GFARM), 2008);	/* gfarm's iosize */
	assert_int_equal(gfcc_seglen(2048, GFCC_UDP), 2032);
	assert_int_equal(gfcc_seglen(256, GFCC_UD_GFARM), GFCC_SEGLEN_MIN);
	assert_int_equal(gfcc_seglen(255, GFCC_UDP), 0);
	assert_int_equal(gfcc_seglen(8192, GFCC_UD), 0);	/* no such IB MTU */
	assert_int_equal(gfcc_seglen(9000, GFCC_UDP), 8984);
	assert_int_equal(gfcc_seglen(65507, GFCC_UDP), 65491);
	assert_int_equal(gfcc_seglen(65508, GFCC_UDP), 0);
	assert_int_equal(gfcc_seglen(1024, (enum gfcc_flavour)7), 0);
}

/* Walks every segment's pieces in order: they must tile the reply stream
 * exactly -- the response once, then each page's bytes in order, each
 * once -- and every segment but the last must be seglen long. */
static void check_layout(const struct gfcc_layout *l, enum gfcc_prefix pfx)
{
	struct gfcc_piece p[NP];
	uint32_t cur_page = 0, cur_off = 0, bytes = 0;
	unsigned maxp = GFCC_PIECES_MAX(l->seglen, l->psize);

	assert_int_equal(l->total, GFCC_RES_LEN + l->npage * l->psize);
	/* gfarm's gfcc_page2seg, and nothing more: every packet is full */
	assert_int_equal(l->nseg, (l->npage * l->psize + GFCC_RES_LEN + l->seglen - 1) / l->seglen);
	for (uint32_t seg = 0; seg < l->nseg; seg++) {
		int n = gfcc_seg_pieces(l, seg, pfx, p, maxp);
		uint32_t len = 0, first, last;
		int i = 0;

		assert_true(n > 0);
		if (pfx != GFCC_PFX_NONE) {
			assert_int_equal(p[0].kind, pfx == GFCC_PFX_GRH ? GFCC_PC_GRH : GFCC_PC_DSEG);
			assert_int_equal(p[0].len, pfx == GFCC_PFX_GRH ? 40 : 16);
			i = 1;
		}
		if (seg == 0) {
			assert_int_equal(p[i].kind, GFCC_PC_RES);
			assert_int_equal(p[i].len, GFCC_RES_LEN);
			len += p[i++].len;
		}
		for (; i < n; i++) {
			assert_int_equal(p[i].kind, GFCC_PC_PAGE);
			assert_int_equal(p[i].page, cur_page);
			assert_int_equal(p[i].off, cur_off);
			assert_true(p[i].len > 0 && p[i].off + p[i].len <= l->psize);
			gfcc_page_segs(l, p[i].page, &first, &last);
			assert_true(first <= seg && seg <= last);
			cur_off += p[i].len;
			if (cur_off == l->psize) {
				assert_int_equal(last, seg);
				cur_page++;
				cur_off = 0;
			}
			len += p[i].len;
		}
		assert_int_equal(len, gfcc_seg_len(l, seg));
		if (seg + 1 < l->nseg)
			assert_int_equal(len, l->seglen);
		else
			assert_true(len > 0 && len <= l->seglen);
		bytes += len;
	}
	assert_int_equal(cur_page, l->npage);
	assert_int_equal(cur_off, 0);
	assert_int_equal(bytes, l->total);
	assert_int_equal(gfcc_seg_len(l, l->nseg), 0);
	assert_int_equal(gfcc_seg_pieces(l, l->nseg, pfx, p, maxp), -ERANGE);
}

/* Independent of the walk above: count each byte's coverage. */
static void check_bytes(const struct gfcc_layout *l)
{
	struct gfcc_piece p[NP];
	uint8_t *cov = calloc(l->npage ? l->npage : 1, l->psize);
	unsigned res = 0;

	assert_non_null(cov);
	for (uint32_t seg = 0; seg < l->nseg; seg++) {
		int n = gfcc_seg_pieces(l, seg, GFCC_PFX_GRH, p, NP);

		for (int i = 0; i < n; i++) {
			if (p[i].kind == GFCC_PC_RES)
				res++;
			if (p[i].kind != GFCC_PC_PAGE)
				continue;
			for (uint32_t b = 0; b < p[i].len; b++)
				cov[(size_t)p[i].page * l->psize + p[i].off + b]++;
		}
	}
	assert_int_equal(res, 1);
	for (size_t b = 0; b < (size_t)l->npage * l->psize; b++)
		if (cov[b] != 1)
			fail_msg("byte %zu covered %u times", b, cov[b]);
	free(cov);
}

static void test_layout_all(void **s)
{
	struct gfcc_layout l;

	for (unsigned m = 0; m < sizeof(mtus) / sizeof(mtus[0]); m++)
		for (unsigned f = 0; f < 3; f++)
			for (unsigned ps = 0; ps < sizeof(psizes) / sizeof(psizes[0]); ps++) {
				uint32_t seglen = gfcc_seglen(mtus[m], flavours[f]);
				uint32_t max = gfcc_max_pages(psizes[ps]);

				for (uint32_t np = 0; np <= max; np++) {
					assert_int_equal(gfcc_layout_init(&l, psizes[ps], np, seglen), 0);
					check_layout(&l, GFCC_PFX_NONE);
					check_layout(&l, f == 2 ? GFCC_PFX_DSEG : GFCC_PFX_GRH);
					if (np <= 3 || np == max)
						check_bytes(&l);
				}
				assert_int_equal(gfcc_layout_init(&l, psizes[ps], max + 1, seglen), -E2BIG);
			}
	/* big UDP datagrams pack many small pages */
	assert_int_equal(gfcc_layout_init(&l, 512, 256, gfcc_seglen(65507, GFCC_UDP)), 0);
	assert_int_equal(l.nseg, 3);
	check_layout(&l, GFCC_PFX_DSEG);
	check_bytes(&l);
	assert_int_equal(gfcc_layout_init(&l, 4096, 256, gfcc_seglen(9000, GFCC_UDP)), 0);
	check_layout(&l, GFCC_PFX_DSEG);
	check_bytes(&l);
}

/* The seed 3.2.2 figure with the packing fix, spelled out: MTU 1024 in
 * gfarm's sizing (984-byte segments), one 4 KiB page, a second page. */
static void test_layout_table(void **s)
{
	struct gfcc_layout l;
	struct gfcc_piece p[8];

	assert_int_equal(gfcc_layout_init(&l, 4096, 2, gfcc_seglen(1024, GFCC_UD_GFARM)), 0);
	assert_int_equal(l.nseg, 9);		/* ceil(8224 / 984) */
	assert_int_equal(gfcc_seg_pieces(&l, 0, GFCC_PFX_GRH, p, 8), 3);
	assert_true(p[0].kind == GFCC_PC_GRH && p[0].len == 40);
	assert_true(p[1].kind == GFCC_PC_RES && p[1].len == 32);
	assert_true(p[2].page == 0 && p[2].off == 0 && p[2].len == 952);
	assert_int_equal(gfcc_seg_pieces(&l, 1, GFCC_PFX_NONE, p, 8), 1);
	assert_true(p[0].page == 0 && p[0].off == 952 && p[0].len == 984);
	/* segment 4 ends page 0 and starts page 1 in the same packet: gfarm's
	 * design doc sends these as two short packets */
	assert_int_equal(gfcc_seg_pieces(&l, 4, GFCC_PFX_NONE, p, 8), 2);
	assert_true(p[0].page == 0 && p[0].off == 3904 && p[0].len == 192);
	assert_true(p[1].page == 1 && p[1].off == 0 && p[1].len == 792);
	assert_int_equal(gfcc_seg_pieces(&l, 8, GFCC_PFX_NONE, p, 8), 1);
	assert_true(p[0].page == 1 && p[0].off == 3744 && p[0].len == 352);
	assert_int_equal(gfcc_seg_len(&l, 8), 352);	/* 8224 - 8 * 984 */
	assert_int_equal(gfcc_seg_pieces(&l, 4, GFCC_PFX_GRH, p, 2), -ENOSPC);
	uint32_t first, last;
	gfcc_page_segs(&l, 1, &first, &last);
	assert_int_equal(first, 4);
	assert_int_equal(last, 8);
	/* the response alone */
	assert_int_equal(gfcc_layout_init(&l, 4096, 0, 2048), 0);
	assert_int_equal(l.nseg, 1);
	assert_int_equal(gfcc_seg_len(&l, 0), 32);
	/* bad layouts */
	assert_int_equal(gfcc_layout_init(&l, 4095, 1, 2048), -EINVAL);
	assert_int_equal(gfcc_layout_init(&l, 4096, 1, GFCC_SEGLEN_MIN - 1), -EINVAL);
	assert_int_equal(gfcc_layout_init(&l, 4096, 1, GFCC_SEGLEN_MAX + 1), -EINVAL);
	assert_int_equal(gfcc_layout_init(&l, 65536, 17, 2048), -E2BIG);
	/* the largest reply in the smallest segments is GFCC_SEG_MAX */
	assert_int_equal(gfcc_layout_init(&l, 4096, 256, GFCC_SEGLEN_MIN), 0);
	assert_int_equal(l.nseg, GFCC_SEG_MAX);
}

/* --- a responder, built on the same layout ------------------------------ */

struct reply {
	struct gfcc_layout l;
	struct gfcc_res res;
	bool udp;
	uint64_t id;
	uint32_t qkey;
};

static void reply_init(struct reply *r, uint32_t psize, uint32_t npage, uint32_t seglen, bool udp)
{
	memset(r, 0, sizeof(*r));
	assert_int_equal(gfcc_layout_init(&r->l, psize, npage, seglen), 0);
	r->res = (struct gfcc_res){ .id = ID, .npage = npage, .nseg = r->l.nseg };
	r->udp = udp;
	r->id = ID;
	r->qkey = QKEY;
}

/* Builds segment `seg` as the responder sends it; returns its length. */
static size_t build(const struct reply *r, uint32_t seg, uint8_t *out)
{
	struct gfcc_piece p[NP];
	int n = gfcc_seg_pieces(&r->l, seg, r->udp ? GFCC_PFX_DSEG : GFCC_PFX_NONE, p, NP);
	size_t len = 0;

	assert_true(n > 0);
	for (int i = 0; i < n; i++) {
		if (p[i].kind == GFCC_PC_DSEG) {
			struct gfcc_dseg d = { .id = r->id, .qkey = r->qkey, .seg = (uint16_t)seg,
					       .npage = (uint16_t)r->l.npage };
			assert_int_equal(gfcc_dseg_encode(&d, out + len), GFCC_DSEG_LEN);
		} else if (p[i].kind == GFCC_PC_RES) {
			assert_int_equal(gfcc_res_encode(&r->res, out + len), GFCC_RES_LEN);
		} else {
			for (uint32_t b = 0; b < p[i].len; b++)
				out[len + b] = pat(p[i].page, p[i].off + b);
		}
		len += p[i].len;
	}
	return len;
}

struct rx {
	struct gfcc_reasm ra;
	uint8_t *mem;
	uint8_t *pages[GFCC_PAGES_MAX];
	uint8_t buf[GFCC_SEGLEN_MAX + GFCC_DSEG_LEN];
};

static struct rx *rx_new(uint32_t psize, uint32_t npage, uint32_t seglen, enum gfcc_ra_mode mode)
{
	struct rx *x = calloc(1, sizeof(*x));
	struct gfcc_reasm_cfg c = { .id = ID, .qkey = QKEY, .psize = psize, .npage = npage,
				    .seglen = seglen, .mode = mode, .pages = x->pages };

	assert_non_null(x);
	x->mem = malloc((size_t)npage * psize);
	assert_non_null(x->mem);
	memset(x->mem, 0xee, (size_t)npage * psize);
	for (uint32_t i = 0; i < npage; i++)
		x->pages[i] = x->mem + (size_t)i * psize;
	assert_int_equal(gfcc_reasm_init(&x->ra, &c), 0);
	return x;
}

static void rx_free(struct rx *x)
{
	free(x->mem);
	free(x);
}

static void check_page(const struct rx *x, uint32_t psize, uint32_t page)
{
	for (uint32_t b = 0; b < psize; b++)
		if (x->pages[page][b] != pat(page, b))
			fail_msg("page %u byte %u: %#x", page, b, x->pages[page][b]);
}

static int feed(struct rx *x, const struct reply *r, uint32_t seg)
{
	size_t len = build(r, seg, x->buf);

	return gfcc_reasm_input(&x->ra, x->buf, len);
}

static uint32_t lcg(uint32_t *st)
{
	*st = *st * 1103515245u + 12345u;
	return *st >> 8;
}

static void shuffle(uint32_t *v, uint32_t n, uint32_t seed)
{
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = lcg(&seed) % i, t = v[i - 1];

		v[i - 1] = v[j];
		v[j] = t;
	}
}

/* Every MTU and flavour, a spread of page counts: in order, reversed,
 * shuffled with every segment twice.  Pages byte-exact, nothing missing. */
static void test_reasm_orders(void **s)
{
	static const uint32_t counts[] = { 1, 2, 3, 17, 255, 256 };
	static uint32_t order[2 * GFCC_SEG_MAX];

	for (unsigned m = 0; m < 5; m++)
		for (unsigned f = 0; f < 3; f++)
			for (unsigned c = 0; c < 6; c++)
				for (unsigned way = 0; way < 3; way++) {
					uint32_t seglen = gfcc_seglen(mtus[m], flavours[f]), np = counts[c];
					struct rx *x = rx_new(4096, np, seglen, GFCC_RA_UDP);
					struct reply r;
					uint32_t n, done = 0;

					reply_init(&r, 4096, np, seglen, true);
					n = r.l.nseg;
					for (uint32_t i = 0; i < n; i++)
						order[i] = way == 1 ? n - 1 - i : i;
					if (way == 2) {
						memcpy(order + n, order, n * sizeof(order[0]));
						n *= 2;
						shuffle(order, n, m * 100 + f * 10 + c);
					}
					for (uint32_t i = 0; i < n; i++) {
						int e = feed(x, &r, order[i]);

						assert_true(e >= 0);
						done += e == GFCC_RA_DONE;
					}
					assert_int_equal(done, 1);
					assert_true(x->ra.done);
					assert_int_equal(gfcc_reasm_error(&x->ra), 0);
					assert_int_equal(gfcc_reasm_npage(&x->ra), np);
					assert_int_equal(gfcc_reasm_nmissing(&x->ra), 0);
					assert_int_equal(gfcc_reasm_next_missing(&x->ra, 0), UINT32_MAX);
					assert_int_equal(x->ra.pages_ok, np);
					assert_int_equal(x->ra.dups, way == 2 ? r.l.nseg : 0);
					assert_true(x->ra.arrived == n);
					for (uint32_t p = 0; p < np; p++) {
						assert_true(gfcc_reasm_page_ok(&x->ra, p));
						check_page(x, 4096, p);
					}
					assert_false(gfcc_reasm_page_ok(&x->ra, np));
					rx_free(x);
				}
}

/* Losses are reported exactly; pages untouched by a lost segment are
 * usable at once; the re-request names just the lost segments. */
static void test_reasm_missing(void **s)
{
	uint32_t seglen = gfcc_seglen(1024, GFCC_UDP);		/* 1008 */
	struct rx *x = rx_new(4096, 8, seglen, GFCC_RA_UDP);
	static const uint32_t lost[] = { 0, 3, 7, 8, 20, 32 };
	struct reply r;
	struct gfcc_xmsg m, d;
	uint8_t b[GFCC_X_MAX];
	bool is_lost[64] = { false };

	reply_init(&r, 4096, 8, seglen, true);
	assert_int_equal(r.l.nseg, 33);		/* ceil(32800 / 1008) */
	for (unsigned i = 0; i < 6; i++)
		is_lost[lost[i]] = true;
	for (uint32_t seg = 0; seg < r.l.nseg; seg++)
		if (!is_lost[seg])
			assert_int_equal(feed(x, &r, seg), GFCC_RA_NEW);
	assert_false(x->ra.done);
	assert_int_equal(gfcc_reasm_nmissing(&x->ra), 6);
	for (uint32_t i = 0, from = 0; i < 6; i++) {
		from = gfcc_reasm_next_missing(&x->ra, from);
		assert_int_equal(from, lost[i]);
		from++;
	}
	assert_int_equal(gfcc_reasm_next_missing(&x->ra, 33), UINT32_MAX);
	/* page p is good iff none of its segments was lost */
	for (uint32_t p = 0; p < 8; p++) {
		uint32_t first, last;
		bool ok = true;

		gfcc_page_segs(&r.l, p, &first, &last);
		for (uint32_t sg = first; sg <= last; sg++)
			ok &= !is_lost[sg];
		assert_int_equal(gfcc_reasm_page_ok(&x->ra, p), ok);
		if (ok)
			check_page(x, 4096, p);
	}
	/* the re-request: base 0, bits 0 3 7 8 20 32 */
	assert_int_equal(gfcc_reasm_resend(&x->ra, 0, GFCC_X_BITS_MAX, &m), 6);
	assert_int_equal(m.type, GFCC_X_RESEND);
	assert_true(m.id == ID && m.qkey == QKEY);
	assert_int_equal(m.base, 0);
	assert_int_equal(m.nbits, 33);
	m.allow = 40;
	assert_int_equal(gfcc_xmsg_encode(&m, b, sizeof(b)), GFCC_X_HDR + 5);
	assert_int_equal(gfcc_xmsg_decode(b, GFCC_X_HDR + 5, &d), 0);
	for (uint32_t i = 0; i < 33; i++)
		assert_int_equal(gfcc_xmsg_bit(&d, i), is_lost[i]);
	/* from a later point, in 8-bit slices, as a small MTU would need */
	assert_int_equal(gfcc_reasm_resend(&x->ra, 4, 4, &m), 2);	/* 7, 8 */
	assert_true(m.base == 7 && m.nbits == 2 && m.bitmap[0] == 3);
	assert_int_equal(gfcc_reasm_resend(&x->ra, 9, 8, &m), 1);	/* 20 */
	assert_true(m.base == 20 && m.nbits == 1);
	assert_int_equal(gfcc_reasm_resend(&x->ra, 33, 8, &m), 0);
	assert_int_equal(gfcc_reasm_resend(&x->ra, 0, 0, &m), 0);
	/* the resends arrive (one twice) and complete it */
	for (unsigned i = 0; i < 5; i++)
		assert_int_equal(feed(x, &r, lost[i]), GFCC_RA_NEW);
	assert_int_equal(feed(x, &r, lost[4]), GFCC_RA_DUP);
	assert_int_equal(feed(x, &r, lost[5]), GFCC_RA_DONE);
	assert_int_equal(feed(x, &r, 1), GFCC_RA_DUP);		/* late copies are harmless */
	for (uint32_t p = 0; p < 8; p++)
		check_page(x, 4096, p);
	assert_int_equal(gfcc_reasm_resend(&x->ra, 0, 100, &m), 0);
	rx_free(x);

	/* nothing in yet: every segment of the request is missing */
	x = rx_new(4096, 256, GFCC_SEGLEN_MIN, GFCC_RA_UDP);
	assert_int_equal(gfcc_reasm_nmissing(&x->ra), GFCC_SEG_MAX);
	assert_int_equal(gfcc_reasm_resend(&x->ra, 0, GFCC_X_BITS_MAX, &m), GFCC_X_BITS_MAX);
	assert_int_equal(gfcc_reasm_resend(&x->ra, GFCC_SEG_MAX - 3, GFCC_X_BITS_MAX, &m), 3);
	assert_int_equal(gfcc_xmsg_encode(&m, b, sizeof(b)), GFCC_X_HDR + 1);
	rx_free(x);
}

/* A datagram that is not this reply's, or is damaged, is dropped with
 * the right error and changes nothing. */
static void test_reasm_rejects(void **s)
{
	uint32_t seglen = gfcc_seglen(512, GFCC_UDP);	/* 496 */
	struct rx *x = rx_new(4096, 4, seglen, GFCC_RA_UDP);
	struct reply r, o;
	size_t len;
	uint8_t save[4096];

	reply_init(&r, 4096, 4, seglen, true);
	len = build(&r, 2, x->buf);
	assert_int_equal(gfcc_reasm_input(&x->ra, x->buf, len - 1), -EMSGSIZE);	/* truncated */
	assert_int_equal(gfcc_reasm_input(&x->ra, x->buf, len + 1), -EMSGSIZE);
	assert_int_equal(gfcc_reasm_input(&x->ra, x->buf, 15), -EMSGSIZE);
	assert_int_equal(gfcc_reasm_input(&x->ra, NULL, 100), -EMSGSIZE);
	o = r; o.id++;		assert_int_equal(feed(x, &o, 2), -EPROTO);	/* another request */
	o = r; o.qkey++;	assert_int_equal(feed(x, &o, 2), -EPROTO);	/* stale qkey */
	len = build(&r, 2, x->buf);
	memset(x->buf + 8, 0, 4);	/* qkey 0 */
	assert_int_equal(gfcc_reasm_input(&x->ra, x->buf, len), -EINVAL);
	/* claims more pages than asked */
	reply_init(&o, 4096, 5, seglen, true);
	assert_int_equal(feed(x, &o, 2), -EBADMSG);
	/* past the reply's last segment */
	len = build(&r, 2, x->buf);
	x->buf[12] = (uint8_t)r.l.nseg;
	assert_int_equal(gfcc_reasm_input(&x->ra, x->buf, len), -ERANGE);
	/* segment 0 whose response disagrees */
	o = r; o.res.id++;	assert_int_equal(feed(x, &o, 0), -EPROTO);
	o = r; o.res.nseg++;	assert_int_equal(feed(x, &o, 0), -EBADMSG);
	len = build(&r, 0, x->buf);
	x->buf[GFCC_DSEG_LEN] = 'G';
	assert_int_equal(gfcc_reasm_input(&x->ra, x->buf, len), -EPROTO);
	x->buf[GFCC_DSEG_LEN] = 'g';
	x->buf[GFCC_DSEG_LEN + 20] = 3;		/* response npage 3, header says 4 */
	assert_int_equal(gfcc_reasm_input(&x->ra, x->buf, len), -EBADMSG);
	assert_int_equal(x->ra.rejected, 13);
	assert_int_equal(x->ra.got, 0);
	assert_false(x->ra.known);
	for (uint32_t p = 0; p < 4; p++)
		for (uint32_t b = 0; b < 4096; b++)
			assert_int_equal(x->pages[p][b], 0xee);

	/* once a reply of 4 pages is under way, one of 3 is a contradiction */
	assert_int_equal(feed(x, &r, 1), GFCC_RA_NEW);
	memcpy(save, x->pages[0], sizeof(save));
	reply_init(&o, 4096, 3, seglen, true);
	assert_int_equal(feed(x, &o, 5), -EBADMSG);
	/* and a segment whose length is another layout's */
	len = build(&r, 33, x->buf);		/* the short last one */
	assert_int_equal(gfcc_reasm_input(&x->ra, x->buf, len), GFCC_RA_NEW);
	len = build(&r, 32, x->buf);
	assert_int_equal(gfcc_reasm_input(&x->ra, x->buf, len - 1), -EMSGSIZE);
	assert_memory_equal(save, x->pages[0], sizeof(save));
	rx_free(x);
}

/* The responder has only a prefix of the pages (seed 3.3.4 "応答パケット
 * が期待より少なければ"), or none, or answers with an error. */
static void test_reasm_short(void **s)
{
	uint32_t seglen = gfcc_seglen(2048, GFCC_UDP);
	struct rx *x = rx_new(4096, 10, seglen, GFCC_RA_UDP);
	struct reply r;

	reply_init(&r, 4096, 6, seglen, true);
	assert_int_equal(gfcc_reasm_npage(&x->ra), 10);
	/* segment 0 last: the header of any segment says the reply's size */
	for (uint32_t seg = r.l.nseg - 1; seg > 0; seg--)
		assert_int_equal(feed(x, &r, seg), GFCC_RA_NEW);
	assert_int_equal(gfcc_reasm_npage(&x->ra), 6);
	assert_int_equal(gfcc_reasm_nmissing(&x->ra), 1);
	assert_int_equal(feed(x, &r, 0), GFCC_RA_DONE);
	for (uint32_t p = 0; p < 10; p++) {
		assert_int_equal(gfcc_reasm_page_ok(&x->ra, p), p < 6);
		if (p < 6)
			check_page(x, 4096, p);
	}
	rx_free(x);

	/* none cached */
	x = rx_new(4096, 10, seglen, GFCC_RA_UDP);
	reply_init(&r, 4096, 0, seglen, true);
	assert_int_equal(feed(x, &r, 0), GFCC_RA_DONE);
	assert_int_equal(gfcc_reasm_npage(&x->ra), 0);
	assert_false(gfcc_reasm_page_ok(&x->ra, 0));
	rx_free(x);

	/* a stale generation: an error, no pages, the caller goes to the origin */
	x = rx_new(4096, 10, seglen, GFCC_RA_UDP);
	reply_init(&r, 4096, 0, seglen, true);
	r.res.err = ESTALE;
	assert_int_equal(gfcc_reasm_error(&x->ra), 0);
	assert_int_equal(feed(x, &r, 0), GFCC_RA_DONE);
	assert_int_equal(gfcc_reasm_error(&x->ra), ESTALE);
	assert_false(gfcc_reasm_page_ok(&x->ra, 0));
	rx_free(x);
}

/* UD: segments in arrival order, no header; copy mode. */
static void test_reasm_ud(void **s)
{
	for (unsigned m = 0; m < 5; m++)
		for (unsigned f = 0; f < 2; f++) {
			uint32_t seglen = gfcc_seglen(mtus[m], flavours[f]);
			struct rx *x = rx_new(4096, 5, seglen, GFCC_RA_UD);
			struct reply r;

			reply_init(&r, 4096, 5, seglen, false);
			for (uint32_t seg = 0; seg < r.l.nseg; seg++) {
				assert_int_equal(feed(x, &r, seg),
						 seg + 1 < r.l.nseg ? GFCC_RA_NEW : GFCC_RA_DONE);
				/* positional: nothing is trusted before the end */
				assert_int_equal(gfcc_reasm_page_ok(&x->ra, 0), seg + 1 == r.l.nseg);
			}
			for (uint32_t p = 0; p < 5; p++)
				check_page(x, 4096, p);
			assert_int_equal(feed(x, &r, 0), -EALREADY);
			rx_free(x);
		}

	/* a lost segment: the later ones land one slot early and the last
	 * (short) one no longer fits -- the reply never completes */
	uint32_t seglen = gfcc_seglen(1024, GFCC_UD);
	struct rx *x = rx_new(4096, 3, seglen, GFCC_RA_UD);
	struct reply r;

	reply_init(&r, 4096, 3, seglen, false);
	assert_int_equal(r.l.nseg, 13);
	for (uint32_t seg = 0; seg < r.l.nseg; seg++) {
		if (seg == 4)
			continue;	/* lost */
		assert_int_equal(feed(x, &r, seg), seg + 1 < r.l.nseg ? GFCC_RA_NEW : -EMSGSIZE);
	}
	assert_int_equal(x->ra.got, 11);
	assert_false(x->ra.done);
	for (uint32_t p = 0; p < 3; p++)
		assert_false(gfcc_reasm_page_ok(&x->ra, p));
	rx_free(x);

	/* segment 0 of another request, a truncated one, then a short reply */
	x = rx_new(4096, 3, seglen, GFCC_RA_UD);
	reply_init(&r, 4096, 3, seglen, false);
	r.res.id++;
	assert_int_equal(feed(x, &r, 0), -EPROTO);
	r.res.id--;
	assert_int_equal(gfcc_reasm_input(&x->ra, x->buf, 31), -EMSGSIZE);
	assert_int_equal(x->ra.next, 0);
	reply_init(&r, 4096, 2, seglen, false);
	for (uint32_t seg = 0; seg < r.l.nseg; seg++)
		assert_int_equal(feed(x, &r, seg), seg + 1 < r.l.nseg ? GFCC_RA_NEW : GFCC_RA_DONE);
	assert_true(gfcc_reasm_page_ok(&x->ra, 1));
	assert_false(gfcc_reasm_page_ok(&x->ra, 2));
	assert_int_equal(gfcc_reasm_placed(&x->ra, 10, NULL), -EINVAL);	/* wrong mode */
	rx_free(x);
}

/* UD with receive WRs posted per the layout (seed 3.2.2 figure): GRH,
 * response, page pieces.  A fake HCA scatters each datagram into them. */
static void test_reasm_placed(void **s)
{
	for (unsigned m = 0; m < 5; m++)
		for (unsigned f = 0; f < 2; f++) {
			uint32_t seglen = gfcc_seglen(mtus[m], flavours[f]);
			uint8_t grh[GFCC_GRH_LEN], resbuf[GFCC_RES_LEN];
			struct rx *x = rx_new(4096, 4, seglen, GFCC_RA_PLACED);
			struct gfcc_layout posted = x->ra.lay;
			struct reply r;
			struct gfcc_piece p[NP];
			uint8_t wire[GFCC_GRH_LEN + 4096];

			reply_init(&r, 4096, 4, seglen, false);
			for (uint32_t seg = 0; seg < posted.nseg; seg++) {
				/* the wire carries a GRH then the sent payload */
				size_t len = build(&r, seg, wire + GFCC_GRH_LEN), at = 0;
				int n = gfcc_seg_pieces(&posted, seg, GFCC_PFX_GRH, p, NP);

				memset(wire, 0x60, GFCC_GRH_LEN);
				for (int i = 0; i < n; i++) {
					uint8_t *dst = p[i].kind == GFCC_PC_GRH ? grh :
						       p[i].kind == GFCC_PC_RES ? resbuf :
						       x->pages[p[i].page] + p[i].off;

					memcpy(dst, wire + at, p[i].len);
					at += p[i].len;
				}
				assert_int_equal(at, GFCC_GRH_LEN + len);
				assert_int_equal(gfcc_reasm_placed(&x->ra, len, resbuf),
						 seg + 1 < posted.nseg ? GFCC_RA_NEW : GFCC_RA_DONE);
			}
			for (uint32_t pg = 0; pg < 4; pg++) {
				assert_true(gfcc_reasm_page_ok(&x->ra, pg));
				check_page(x, 4096, pg);
			}
			assert_int_equal(gfcc_reasm_placed(&x->ra, 1, resbuf), -EALREADY);
			rx_free(x);
		}
}

static void test_reasm_init(void **s)
{
	struct gfcc_reasm r;
	uint8_t page[4096], *pages[2] = { page, NULL };
	struct gfcc_reasm_cfg c = { .id = 1, .qkey = 1, .psize = 4096, .npage = 1, .seglen = 1024,
				    .mode = GFCC_RA_UDP, .pages = pages };

	assert_int_equal(gfcc_reasm_init(&r, &c), 0);
	c.qkey = 0x80000000u;	assert_int_equal(gfcc_reasm_init(&r, &c), -EINVAL);
	c.qkey = 1; c.npage = 0; assert_int_equal(gfcc_reasm_init(&r, &c), -EINVAL);
	c.npage = 2;		assert_int_equal(gfcc_reasm_init(&r, &c), -EINVAL);	/* NULL page */
	c.npage = 257;		assert_int_equal(gfcc_reasm_init(&r, &c), -E2BIG);
	c.npage = 1; c.pages = NULL; assert_int_equal(gfcc_reasm_init(&r, &c), -EINVAL);
	c.mode = GFCC_RA_PLACED; assert_int_equal(gfcc_reasm_init(&r, &c), 0);
	c.mode = (enum gfcc_ra_mode)3; assert_int_equal(gfcc_reasm_init(&r, &c), -EINVAL);
	c.mode = GFCC_RA_UD; c.pages = pages; c.seglen = 100;
	assert_int_equal(gfcc_reasm_init(&r, &c), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_seglen),
		cmocka_unit_test(test_layout_all),
		cmocka_unit_test(test_layout_table),
		cmocka_unit_test(test_reasm_orders),
		cmocka_unit_test(test_reasm_missing),
		cmocka_unit_test(test_reasm_rejects),
		cmocka_unit_test(test_reasm_short),
		cmocka_unit_test(test_reasm_ud),
		cmocka_unit_test(test_reasm_placed),
		cmocka_unit_test(test_reasm_init),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
