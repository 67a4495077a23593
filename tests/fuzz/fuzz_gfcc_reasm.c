/* libFuzzer: the requester's packet input.  A reassembler is set up for a
 * request from the first bytes; the rest is a script of datagrams -- raw
 * bytes, or a well-formed segment of a (possibly shorter, possibly
 * larger) reply, optionally damaged -- in any order.  Nothing may write
 * outside the page buffers (ASan: each is its own allocation of exactly
 * psize bytes), the counters must stay consistent, and over UDP a page
 * reported good must hold exactly what the responder sent when only
 * undamaged segments got in.
 *
 * Setup bytes: mode/MTU, page size, pages requested, pages in the reply
 * (an empty reply with the high bit set is an ESTALE error).
 * Then ops: 0 raw datagram (u8 length/4, bytes), 1 synthesized segment
 * of the reply (u16 index, u8 damage), 2 re-request built and encoded,
 * 3 synthesized segment of a full reply (the page count requested: it
 * contradicts a short reply). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ibcache/gfcc_seg.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

#define ID	0x0102030405060708ull
#define QKEY	0x01234567u
#define NP	GFCC_PIECES_MAX(GFCC_SEGLEN_MAX, GFCC_PSIZE_MIN)

static const uint32_t mtus[] = { 256, 512, 1024, 2048, 4096, 9000 };
static const uint32_t psizes[] = { 512, 1024, 4096, 8192, 65536 };

static uint8_t pat(uint32_t page, uint32_t off)
{
	return (uint8_t)(page * 131 + off * 7 + (off >> 8) + 1);
}

struct fz {
	struct gfcc_reasm ra;
	struct gfcc_layout reply;	/* what the synthesized responder sends */
	struct gfcc_layout posted;	/* what the requester asked for */
	enum gfcc_ra_mode mode;
	uint32_t err;			/* the synthesized response's */
	bool damaged_in;		/* a raw or damaged datagram was accepted */
	uint8_t *pages[GFCC_PAGES_MAX];
	uint8_t resbuf[GFCC_RES_LEN];
	uint8_t dg[GFCC_SEGLEN_MAX + GFCC_DSEG_LEN];
};

/* Segment `seg` of a reply laid out as l, as the responder sends it. */
static size_t synth(struct fz *f, const struct gfcc_layout *l, uint32_t seg)
{
	struct gfcc_piece p[NP];
	struct gfcc_res res = { .id = ID, .err = l->npage ? 0 : f->err, .npage = l->npage,
				.nseg = l->nseg };
	int k = gfcc_seg_pieces(l, seg,
				f->mode == GFCC_RA_UDP ? GFCC_PFX_DSEG : GFCC_PFX_NONE, p, NP);
	size_t len = 0;

	if (k < 0)
		__builtin_trap();
	for (int i = 0; i < k; i++) {
		if (p[i].kind == GFCC_PC_DSEG) {
			struct gfcc_dseg g = { .id = ID, .qkey = QKEY, .seg = (uint16_t)seg,
					       .npage = (uint16_t)l->npage };

			gfcc_dseg_encode(&g, f->dg + len);
		} else if (p[i].kind == GFCC_PC_RES) {
			gfcc_res_encode(&res, f->dg + len);
		} else {
			for (uint32_t b = 0; b < p[i].len; b++)
				f->dg[len + b] = pat(p[i].page, p[i].off + b);
		}
		len += p[i].len;
	}
	return len;
}

/* PLACED: scatter the datagram into the buffers posted for the next
 * receive, as the HCA would, clipped to what was posted. */
static int placed(struct fz *f, const uint8_t *buf, size_t len)
{
	struct gfcc_piece p[NP];
	int k = gfcc_seg_pieces(&f->posted, f->ra.next, GFCC_PFX_NONE, p, NP);
	size_t at = 0;

	for (int i = 0; i < k && at < len; i++) {
		size_t c = len - at < p[i].len ? len - at : p[i].len;

		if (p[i].kind == GFCC_PC_RES)
			memcpy(f->resbuf, buf + at, c);
		else
			memcpy(f->pages[p[i].page] + p[i].off, buf + at, c);
		at += c;
	}
	return gfcc_reasm_placed(&f->ra, len, f->resbuf);
}

/* Counters after every datagram; page contents (costly) at the end. */
static void check(const struct fz *f, bool contents)
{
	const struct gfcc_reasm *r = &f->ra;

	if (r->got > r->lay.nseg || r->pages_ok > r->lay.npage || r->lay.npage > r->npage_req)
		__builtin_trap();
	if (r->done != (r->got == r->lay.nseg))
		__builtin_trap();
	if (gfcc_reasm_nmissing(r) != r->lay.nseg - r->got)
		__builtin_trap();
	if (r->done && gfcc_reasm_next_missing(r, 0) != UINT32_MAX)
		__builtin_trap();
	if (gfcc_reasm_error(r) && (r->lay.npage || r->pages_ok || gfcc_reasm_page_ok(r, 0)))
		__builtin_trap();
	if (!contents || f->mode != GFCC_RA_UDP || f->damaged_in)
		return;
	for (uint32_t p = 0; p < r->npage_req; p++) {
		if (!gfcc_reasm_page_ok(r, p))
			continue;
		for (uint32_t b = 0; b < r->lay.psize; b++)
			if (f->pages[p][b] != pat(p, b))
				__builtin_trap();
	}
}

static void run(struct fz *f, const uint8_t *d, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint8_t op = d[i++];
		int e = 0;
		size_t len;

		switch (op & 3) {
		case 0:
			len = i < n ? (size_t)d[i++] * 4 + (op >> 2 & 3) : 0;
			if (len > n - i)
				len = n - i;
			if (f->mode == GFCC_RA_PLACED) {
				e = placed(f, d + i, len);
			} else {
				/* copied out: the reassembler may not read past len */
				uint8_t *b = malloc(len ? len : 1);

				memcpy(b, d + i, len);
				e = gfcc_reasm_input(&f->ra, b, len);
				free(b);
			}
			if (e == GFCC_RA_NEW || e == GFCC_RA_DONE)
				f->damaged_in = true;
			i += len;
			break;
		case 1:
		case 3: {
			const struct gfcc_layout *l = (op & 3) == 1 ? &f->reply : &f->posted;
			uint32_t seg = 0, dmg = 0;

			if (n - i >= 3) {
				seg = (uint32_t)d[i] | (uint32_t)d[i + 1] << 8;
				dmg = d[i + 2];
				i += 3;
			}
			seg %= l->nseg + 1;
			len = seg < l->nseg ? synth(f, l, seg) : 16;
			if (dmg & 1 && len)
				f->dg[(dmg >> 1) % len] ^= (uint8_t)(op | 1);
			if (dmg & 0x80 && len)
				len -= 1 + (dmg >> 1 & 7) % len;
			e = f->mode == GFCC_RA_PLACED ? placed(f, f->dg, len)
						      : gfcc_reasm_input(&f->ra, f->dg, len);
			if ((e == GFCC_RA_NEW || e == GFCC_RA_DONE) && (dmg & 0x81))
				f->damaged_in = true;
			break;
		}
		case 2: {
			struct gfcc_xmsg m;
			uint8_t out[GFCC_X_MAX];
			uint32_t from = op >> 2, want = (uint32_t)(op >> 4) * 97 + 1;
			uint32_t k = gfcc_reasm_resend(&f->ra, from, want, &m);

			if (k) {
				m.allow = 1;
				if (gfcc_xmsg_encode(&m, out, sizeof(out)) < 0 || m.nbits > want)
					__builtin_trap();
				for (uint32_t b = 0; b < m.nbits; b++)
					if (gfcc_xmsg_bit(&m, b) &&
					    gfcc_reasm_next_missing(&f->ra, m.base + b) != m.base + b)
						__builtin_trap();
			}
			break;
		}
		}
		if (e < -4095 || e > GFCC_RA_DONE)
			__builtin_trap();
		check(f, false);
	}
	check(f, true);
}

static struct fz fz;	/* ~66 KiB: not on the stack */

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct gfcc_reasm_cfg c = { .id = ID, .qkey = QKEY };
	enum gfcc_flavour fl;
	uint32_t mtu, maxp, rnp;

	if (n < 4)
		return 0;
	memset(&fz, 0, sizeof(fz) - sizeof(fz.dg));
	fz.mode = (enum gfcc_ra_mode)(d[0] % 3);
	mtu = mtus[d[0] / 3 % 6];
	fl = fz.mode == GFCC_RA_UDP ? GFCC_UDP : d[0] & 0x80 ? GFCC_UD_GFARM : GFCC_UD;
	if (fz.mode != GFCC_RA_UDP && mtu > 4096)
		mtu = 4096;
	c.psize = psizes[d[1] % 5];
	maxp = gfcc_max_pages(c.psize);
	c.npage = 1 + d[2] % maxp;
	rnp = d[3] % (c.npage + 2);	/* now and then more than asked */
	if (rnp > maxp)
		rnp = maxp;
	fz.err = !rnp && d[3] & 0x80 ? ESTALE : 0;
	c.seglen = gfcc_seglen(mtu, fl);
	c.mode = fz.mode;
	c.pages = fz.pages;
	for (uint32_t p = 0; p < c.npage; p++)
		fz.pages[p] = malloc(c.psize);
	if (gfcc_reasm_init(&fz.ra, &c) != 0 ||
	    gfcc_layout_init(&fz.reply, c.psize, rnp, c.seglen) != 0 ||
	    gfcc_layout_init(&fz.posted, c.psize, c.npage, c.seglen) != 0)
		__builtin_trap();
	run(&fz, d + 4, n - 4);
	for (uint32_t p = 0; p < c.npage; p++)
		free(fz.pages[p]);
	return 0;
}
