/* libFuzzer: the responder's input through the real engine (ibc_srv.h):
 * requests (raw bytes or well-formed ones with fuzzed fields), control
 * messages from the right and wrong requesters, pumps that the send queue
 * takes only part of, and the clock.  Nothing may crash or leak; every
 * datagram out must fit the endpoint's MTU, carry a decodable header and,
 * first of its reply, a response consistent with its layout; and the
 * bounds on held requests and memory hold throughout.
 *
 * Setup byte: flavour, MTU, limits.  Then ops: 0 raw datagram, 1 request,
 * 2 control message, 3 pump (and give some back), 4 clock + timer. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ibcache/ibc_srv.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

#define INO	7u
#define GEN	3u
#define QKEY	0x1234u

static const uint32_t mtus[] = { 256, 1024, 1500, 4096, 9000, 65507 };
static const uint32_t psizes[] = { 512, 4096, 65536, 3000 };

static uint64_t held_pages, held_size;

static int store(void *ctx, const struct gfcc_req *q, uint8_t *buf, uint64_t now, uint64_t *size)
{
	uint32_t k = 0;

	(void)ctx;
	(void)now;
	*size = held_size;
	if (q->obj.ino != INO)
		return -ENOENT;
	if (q->obj.gen != GEN)
		return -ESTALE;
	for (uint32_t b = 0; b < q->npblk; b++)
		for (uint64_t p = q->pblk[b].index; p - q->pblk[b].index < q->pblk[b].count; p++) {
			if (p >= held_pages)
				return (int)k;
			memset(buf + (size_t)k * q->psize, (int)(p & 0xff), q->psize);
			k++;
		}
	return (int)k;
}

struct rd {
	const uint8_t *d;
	size_t n, i;
};

static uint32_t get(struct rd *r, int bytes)
{
	uint32_t v = 0;

	for (int k = 0; k < bytes; k++)
		v = v << 8 | (r->i < r->n ? r->d[r->i++] : 0);
	return v;
}

static void *peer_of(uint32_t v)
{
	return (void *)(uintptr_t)(0x1000 + (v & 3) * 0x10);
}

/* With hosts: the four peers are two ports each of two hosts. */
static size_t host_of(const void *peer, uint8_t key[IBC_SRV_HOST_MAX])
{
	key[0] = (uint8_t)((uintptr_t)peer >> 5);
	return 1;
}

static size_t mk_request(struct rd *r, uint8_t *out, uint32_t mtu)
{
	struct gfcc_req q = { .cmd = GFCC_CMD_READ_REQ, .qkey = QKEY };
	uint32_t f = get(r, 2), nb = 1 + (f >> 4 & 7);
	uint64_t at = get(r, 1);
	int len;

	q.id = f & 7;
	q.obj.ino = f & 8 ? INO + 1 : INO;
	q.obj.gen = f & 0x8000 ? GEN + 1 : GEN;
	q.psize = psizes[f >> 8 & 3];
	q.has_ext = !(f & 0x400);
	q.ext.xver = 1;
	q.ext.window = f & 0x800 ? 0 : 1 + get(r, 1) % 64;
	q.ext.seglen = (uint16_t)(f & 0x1000 ? get(r, 2) : mtu - (f & 0x2000 ? 0 : 16));
	for (uint32_t b = 0; b < nb; b++) {
		q.pblk[b].index = at;
		q.pblk[b].count = 1 + get(r, 1) % 40;
		q.npage += (uint32_t)q.pblk[b].count;
		at += q.pblk[b].count + get(r, 1) % 3;
	}
	q.npblk = nb;
	len = gfcc_req_encode(&q, out, GFCC_REQ_MAX);
	if (len < 0) {
		/* out of range for the encoder: the raw header still goes */
		memset(out, 0, GFCC_REQ_HDR);
		memcpy(out, "gfcc1", 5);
		out[48] = (uint8_t)QKEY;
		out[49] = (uint8_t)(QKEY >> 8);
		return GFCC_REQ_HDR + (f & 31);
	}
	return (size_t)len;
}

static size_t mk_ctl(struct rd *r, uint8_t *out)
{
	struct gfcc_xmsg m = { .qkey = QKEY };
	uint32_t f = get(r, 2);
	int len;

	m.id = f & 7;
	m.type = (uint8_t)(1 + (f >> 3) % 3);
	if (f & 0x20)
		m.qkey = QKEY + 1;
	m.allow = get(r, 2);
	if (m.type == GFCC_X_RESEND) {
		m.base = (uint16_t)get(r, 1);
		m.nbits = (uint16_t)(1 + get(r, 1));
		for (uint32_t b = 0; b < (m.nbits + 7u) / 8; b++)
			m.bitmap[b] = (uint8_t)get(r, 1);
		if (m.nbits % 8)
			m.bitmap[m.nbits / 8] &= (uint8_t)((1u << (m.nbits % 8)) - 1);
		m.bitmap[0] |= 1;
	}
	len = gfcc_xmsg_encode(&m, out, GFCC_X_MAX);
	return len < 0 ? 0 : (size_t)len;
}

static void check_out(const struct ibc_out *o, uint32_t mtu, enum gfcc_flavour fl)
{
	struct gfcc_dseg g;
	struct gfcc_res r;

	if (o->hlen + o->len > mtu || !o->len || !o->buf)
		__builtin_trap();
	if (fl == GFCC_UDP) {
		/* raw requests may carry any valid key: the reply carries it */
		if (o->hlen != GFCC_DSEG_LEN || gfcc_dseg_decode(o->hdr, o->hlen, &g) ||
		    g.seg != o->seg || g.qkey != o->qkey)
			__builtin_trap();
	} else if (o->hlen || !gfcc_qkey_ok(o->qkey)) {
		__builtin_trap();
	}
	if (o->seg == 0) {
		if (gfcc_res_decode(o->buf, o->len, &r))
			__builtin_trap();
		if (r.err && o->len != GFCC_RES_LEN)
			__builtin_trap();
		/* the store's size, and only one the field can hold */
		if (r.has_size && (r.err || r.size != held_size || held_size > GFCC_RES_SIZE_MAX))
			__builtin_trap();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct rd r = { d, n, 0 };
	/* each setting its own bits, so that every combination is had:
	 * 0 flavour, 1-3 MTU, 4-5 max_states, 6 max_mem, 7 burst, 8 hosts,
	 * 9 a size too big to tell, 10-15 pages held, 16-19 the last page's
	 * shortfall */
	uint32_t setup = get(&r, 3);
	struct ibc_srv_cfg c = { .flavour = setup & 1 ? GFCC_UD : GFCC_UDP,
				 .mtu = mtus[(setup >> 1 & 7) % 6], .max_states = 1 + (setup >> 4 & 3),
				 .max_mem = (setup & 0x40 ? 2u : 64u) << 20, .ttl_ns = 1000,
				 .burst = 1 + (setup >> 7 & 1) * 7,
				 .host = setup & 0x100 ? host_of : NULL };
	struct ibc_srv *s;
	struct ibc_srv_stats st;
	static struct ibc_out out[128];
	static uint8_t buf[GFCC_REQ_MAX + 64];
	uint64_t now = 0;

	if (c.flavour == GFCC_UD && c.mtu > 4096)
		c.mtu = 4096;
	held_pages = 30 + (setup >> 10 & 63);
	/* a copy of some size, or one too big for the reply to tell */
	held_size = setup & 0x200 ? GFCC_RES_SIZE_MAX + 1 + setup
				  : held_pages * 4096 - (setup >> 16 & 15);
	s = ibc_srv_new(&c, store, NULL);
	if (!s)
		__builtin_trap();
	while (r.i < r.n) {
		uint32_t op = get(&r, 1);
		size_t len;

		switch (op % 5) {
		case 0:
			len = get(&r, 1) % (sizeof(buf) / 8) * 8;
			for (size_t k = 0; k < len; k++)
				buf[k] = (uint8_t)get(&r, 1);
			ibc_srv_input(s, peer_of(op >> 3), buf, len, now);
			break;
		case 1:
			len = mk_request(&r, buf, c.mtu);
			ibc_srv_input(s, peer_of(op >> 3), buf, len, now);
			break;
		case 2:
			len = mk_ctl(&r, buf);
			ibc_srv_input(s, peer_of(op >> 3), buf, len, now);
			break;
		case 3: {
			int k = ibc_srv_pump(s, out, 1 + (int)(op >> 3) % 128, now), back;

			for (int i = 0; i < k; i++)
				check_out(&out[i], c.mtu, c.flavour);
			back = k ? (int)get(&r, 1) % (k + 1) : 0;
			ibc_srv_unsent(s, out + (k - back), back);
			break;
		}
		case 4:
			now += (uint64_t)get(&r, 1) * 20;
			ibc_srv_timer(s, now);
			break;
		}
		ibc_srv_get_stats(s, &st);
		if (st.states > c.max_states || st.state_mem > c.max_mem)
			__builtin_trap();
	}
	ibc_srv_free(s);
	return 0;
}
