/* libFuzzer: the requester's packet input through its engine (ibc_rq.h):
 * a request set up from the first bytes (UDP, UD copy or UD placed; MTU,
 * window, a page list with gaps), then datagrams -- raw, or segments of a
 * reply that may be shorter, longer, damaged, late or from another
 * request -- timers and transport failures.  Nothing may crash or write
 * outside the page buffers; once over a request stays over; every control
 * message decodes, names this request, and its allow never shrinks; a
 * page is good only when its request says so, and over UDP a good page
 * from undamaged segments holds the responder's bytes. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ibcache/ibc_rq.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

#define ID	0x0a0b0c0d01020304ull
#define QKEY	0x00abcdefu
#define PS	4096u
#define NP	GFCC_PIECES_MAX(GFCC_SEGLEN_MAX, GFCC_PSIZE_MIN)

static const uint32_t mtus[] = { 256, 1024, 1500, 4096, 9000 };

struct fz {
	struct ibc_rq r;
	uint64_t pages[GFCC_PAGES_MAX];
	uint8_t *dst[GFCC_PAGES_MAX];
	uint8_t resbuf[GFCC_RES_LEN];
	uint32_t last_allow;
	bool damaged;
	enum ibc_rq_state prev;
	uint8_t dg[9000 + GFCC_DSEG_LEN];	/* last: not cleared per input */
};

static uint8_t pat(uint64_t page, uint32_t off)
{
	return (uint8_t)(page * 7 + off * 11 + 5);
}

/* Segment seg of a reply of npage pages, as a responder sends it. */
static size_t synth(struct fz *f, uint32_t npage, uint32_t seg, uint32_t err)
{
	struct gfcc_layout l;
	struct gfcc_piece p[NP];
	bool udp = f->r.flavour == GFCC_UDP;
	struct gfcc_res res = { .id = ID, .err = err };
	size_t len = 0;
	int k;

	if (err)
		npage = 0;
	if (gfcc_layout_init(&l, PS, npage, f->r.ra.lay.seglen) || seg >= l.nseg)
		return 0;
	res.npage = npage;
	res.nseg = l.nseg;
	k = gfcc_seg_pieces(&l, seg, udp ? GFCC_PFX_DSEG : GFCC_PFX_NONE, p, NP);
	for (int i = 0; i < k; i++) {
		if (p[i].kind == GFCC_PC_DSEG) {
			struct gfcc_dseg g = { .id = ID, .qkey = QKEY, .seg = (uint16_t)seg,
					       .npage = (uint16_t)npage };

			gfcc_dseg_encode(&g, f->dg + len);
		} else if (p[i].kind == GFCC_PC_RES) {
			gfcc_res_encode(&res, f->dg + len);
		} else {
			uint64_t fp = f->pages[p[i].page];

			for (uint32_t b = 0; b < p[i].len; b++)
				f->dg[len + b] = pat(fp, p[i].off + b);
		}
		len += p[i].len;
	}
	return len;
}

static void check_out(struct fz *f, const struct ibc_rq_out *o)
{
	for (int i = 0; i < o->n; i++) {
		struct gfcc_xmsg m;

		if (gfcc_xmsg_decode(o->msg[i], o->len[i], &m) || m.id != ID || m.qkey != QKEY)
			__builtin_trap();
		if (m.allow < f->last_allow)
			__builtin_trap();
		f->last_allow = m.allow;
		if (f->r.flavour != GFCC_UDP)
			__builtin_trap();	/* UD asks nothing */
	}
	if (o->request && f->r.flavour != GFCC_UDP)
		__builtin_trap();
}

static void check(struct fz *f)
{
	struct ibc_rq *r = &f->r;
	uint32_t np = ibc_rq_npages(r);

	if (f->prev != IBC_RQ_WAIT && r->state != f->prev)
		__builtin_trap();
	f->prev = r->state;
	if (r->state == IBC_RQ_DONE && !r->err && r->ra.pages_ok != ibc_rq_reply_pages(r) &&
	    r->flavour == GFCC_UDP)
		__builtin_trap();
	if (ibc_rq_clean(r) && r->state != IBC_RQ_DONE)
		__builtin_trap();
	for (uint32_t i = 0; i < np; i++) {
		if (!ibc_rq_page_ok(r, i))
			continue;
		if (r->state == IBC_RQ_DONE && r->err)
			__builtin_trap();
		if (r->flavour != GFCC_UDP && r->state != IBC_RQ_DONE)
			__builtin_trap();
		if (f->damaged || r->ra.mode == GFCC_RA_PLACED)
			continue;
		for (uint32_t b = 0; b < PS; b += 509)
			if (f->dst[i][b] != pat(f->pages[i], b))
				__builtin_trap();
	}
}

static struct fz fz;

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct ibc_rq_cfg c = { .id = ID, .qkey = QKEY, .obj = { .ino = 1, .gen = 2 }, .psize = PS };
	struct fz *f = &fz;
	uint64_t now = 0, heard = 0, at;
	uint32_t np, mtu;
	size_t i = 6;
	int taken;

	if (n < 6)
		return 0;
	memset(f, 0, offsetof(struct fz, dg));
	c.flavour = d[0] & 1 ? GFCC_UD : GFCC_UDP;
	c.placed = c.flavour == GFCC_UD && (d[0] & 2);
	mtu = mtus[(d[0] >> 2) % 5];
	if (c.flavour == GFCC_UD && mtu > 4096)
		mtu = 4096;
	c.seglen = gfcc_seglen(mtu, c.flavour == GFCC_UD ? GFCC_UD : GFCC_UDP);
	c.window = c.flavour == GFCC_UDP ? 1 + d[1] % 64 : 0;
	np = 1 + d[2] % 64;
	at = d[3];
	for (uint32_t k = 0; k < np; k++) {
		f->pages[k] = at;
		at += 1 + (d[4] >> (k % 8) & 1) * (k % 3);
		f->dst[k] = malloc(PS);
	}
	c.pages = f->pages;
	c.npages = np;
	c.max_pblk = gfcc_req_max_pblk(mtu, true);
	c.dst = c.placed ? NULL : f->dst;
	c.rto_ns = 1000 + d[5] * 100u;
	c.timeout_ns = 100000;
	taken = ibc_rq_init(&f->r, &c);
	if (taken <= 0 || (uint32_t)taken > np)
		__builtin_trap();
	while (i < n) {
		uint8_t op = d[i++];
		struct ibc_rq_out o = { 0 };
		size_t len;

		switch (op & 3) {
		case 0: {	/* raw */
			uint8_t *b;

			len = i < n ? d[i++] * 8u : 0;
			if (len > n - i)
				len = n - i;
			b = malloc(len ? len : 1);
			memcpy(b, d + i, len);
			/* placed: the device scatters the first 32 bytes into the
			 * response buffer, which is always that long */
			memset(f->resbuf, 0, sizeof(f->resbuf));
			memcpy(f->resbuf, b, len < GFCC_RES_LEN ? len : GFCC_RES_LEN);
			if ((c.placed ? ibc_rq_placed(&f->r, len, f->resbuf, now)
				      : ibc_rq_input(&f->r, b, len, now, &o)) >= 0)
				f->damaged = true;
			free(b);
			i += len;
			break;
		}
		case 1: {	/* a segment of a (maybe other-sized) reply */
			uint32_t npage = (uint32_t)taken, seg = 0, dmg = 0, err = 0;

			if (n - i >= 3) {
				seg = d[i] | (uint32_t)(d[i + 1] & 0x7f) << 8;
				if (d[i + 1] & 0x80)
					npage = d[i + 2] % (uint32_t)(taken + 2);
				dmg = d[i + 2];
				err = (dmg & 0x70) == 0x70 ? ESTALE : 0;
				i += 3;
			}
			len = synth(f, npage, seg, err);
			if (!len)
				break;
			/* UD takes the n-th arrival as segment n (gfarm: the QP keeps
			 * order): another one there is wrong bytes it cannot see */
			if (c.flavour == GFCC_UD && (seg != f->r.ra.next || npage != (uint32_t)taken))
				dmg |= 0x100;
			if (dmg & 1)
				f->dg[(dmg >> 1) % len] ^= 0x5a;
			if ((dmg & 0x81) == 0x80 && 1u + dmg % 8 < len)
				len -= 1 + dmg % 8;	/* truncated */
			if (c.placed) {
				if (ibc_rq_placed(&f->r, len, f->dg, now) >= 0 && (dmg & 0x181))
					f->damaged = true;
			} else if (c.flavour == GFCC_UDP && (op & 0x80) && len > GFCC_DSEG_LEN) {
				/* the pool's zero-copy path: the kernel put the payload
				 * where the expected segment goes; the header says
				 * which one came, maybe another */
				uint32_t want = op >> 2 & 31;
				struct gfcc_piece p[NP];
				const uint8_t *b = f->dg + GFCC_DSEG_LEN;
				size_t left = len - GFCC_DSEG_LEN;
				/* the pool only ever predicts segments still missing */
				bool missing = want < f->r.ra.lay.nseg &&
					       !(f->r.ra.segmap[want / 64] >> (want % 64) & 1);
				int np = missing ?
					gfcc_seg_pieces(&f->r.ra.lay, want, GFCC_PFX_NONE, p, NP) : 0;

				for (int j = 0; j < np && left; j++) {
					size_t cnt = left < p[j].len ? left : p[j].len;

					memcpy(p[j].kind == GFCC_PC_RES ? f->resbuf
						 : f->dst[p[j].page] + p[j].off, b, cnt);
					b += cnt;
					left -= cnt;
				}
				if (ibc_rq_input_hdr(&f->r, f->dg, len, f->resbuf, now, &o) >= 0 &&
				    (want != seg || (dmg & 0x181)))
					f->damaged = true;
			} else if (ibc_rq_input(&f->r, f->dg, len, now, &o) >= 0 && (dmg & 0x181)) {
				f->damaged = true;
			}
			break;
		}
		case 2:		/* the clock */
			now += (uint64_t)(op >> 2) * 500;
			if (op & 0x40)
				heard = now;	/* the responder busy with other requests */
			if (now >= ibc_rq_next_timer(&f->r, heard) || (op & 0x80))
				ibc_rq_timer(&f->r, now, heard, &o);
			if (ibc_rq_next_timer(&f->r, heard) < now && f->r.state == IBC_RQ_WAIT &&
			    ibc_rq_next_timer(&f->r, heard) + 1000000 < now)
				__builtin_trap();	/* a timer left far behind */
			break;
		case 3:
			if ((op & 0xfc) == 0xfc)
				ibc_rq_fail(&f->r, -ECONNREFUSED, &o);
			break;
		}
		check_out(f, &o);
		check(f);
	}
	for (uint32_t k = 0; k < np; k++)
		free(f->dst[k]);
	return 0;
}
