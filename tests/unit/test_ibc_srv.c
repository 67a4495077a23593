/* The responder engine (ibc_srv.h) with an in-memory page store: replies
 * in order and whole, credits never exceeded, RESEND ahead of new
 * segments, FIN and TTL freeing, duplicates ignored, errors as a bare
 * response, limits (ENOMEM, eviction of replies wholly sent), the
 * round robin between requests, and send queues that take only part. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ibcache/ibc_srv.h"
#include "ibc_test_store.h"

#define MS	1000000ull

static struct ibc_srv *mk(enum gfcc_flavour f, uint32_t mtu, uint32_t states, uint64_t mem)
{
	struct ibc_srv_cfg c = { .flavour = f, .mtu = mtu, .max_states = states, .max_mem = mem,
				 .ttl_ns = 100 * MS, .burst = 8 };
	struct ibc_srv *s = ibc_srv_new(&c, store, NULL);

	assert_non_null(s);
	held = 1000;
	return s;
}

/* A request for pages [first, first + n) in one block. */
static size_t req(uint8_t *out, uint64_t id, uint64_t ino, uint64_t first, uint32_t n,
		  uint32_t seglen, uint32_t window)
{
	struct gfcc_req q = { .id = id, .obj = { .ino = ino, .gen = GEN }, .qkey = 0x1234,
			      .cmd = GFCC_CMD_READ_REQ, .psize = PS, .npage = n, .npblk = 1,
			      .has_ext = true,
			      .ext = { .xver = 1, .seglen = (uint16_t)seglen, .window = window } };
	int len;

	q.pblk[0] = (struct gfcc_pblk){ first, n };
	len = gfcc_req_encode(&q, out, GFCC_REQ_MAX);
	assert_true(len > 0);
	return (size_t)len;
}

static size_t ctl(uint8_t *out, uint64_t id, uint32_t qkey, uint8_t type, uint32_t allow,
		  uint16_t base, const uint32_t *segs, int nsegs)
{
	struct gfcc_xmsg m = { .id = id, .qkey = qkey, .type = type, .allow = allow };
	int len;

	if (type == GFCC_X_RESEND) {
		m.base = base;
		for (int i = 0; i < nsegs; i++) {
			uint32_t b = segs[i] - base;

			m.bitmap[b / 8] |= (uint8_t)(1u << (b % 8));
			if (b + 1 > m.nbits)
				m.nbits = (uint16_t)(b + 1);
		}
	}
	len = gfcc_xmsg_encode(&m, out, GFCC_X_MAX);
	assert_true(len > 0);
	return (size_t)len;
}

/* Feeds the pump's datagrams to a UDP reassembler. */
static int drain(struct ibc_srv *s, struct gfcc_reasm *ra, int max, uint64_t now,
		 struct ibc_out *keep)
{
	struct ibc_out out[64];
	uint8_t dg[GFCC_SEGLEN_MAX + GFCC_DSEG_LEN];
	int n = ibc_srv_pump(s, out, max < 64 ? max : 64, now);

	for (int i = 0; i < n; i++) {
		memcpy(dg, out[i].hdr, out[i].hlen);
		memcpy(dg + out[i].hlen, out[i].buf, out[i].len);
		if (ra)
			assert_true(gfcc_reasm_input(ra, dg, out[i].hlen + out[i].len) >= 0);
		if (keep)
			keep[i] = out[i];
	}
	return n;
}

/* peer grants request 1 all the credit it needs at `now`, and the server
 * sends everything: the reply is wholly sent. */
static void send_all_of_1(struct ibc_srv *s, void *peer, uint64_t now)
{
	uint8_t b[GFCC_REQ_MAX];
	size_t len = ctl(b, 1, 0x1234, GFCC_X_CREDIT, 1000, 0, NULL, 0);

	assert_int_equal(ibc_srv_input(s, peer, b, len, now), 0);
	while (drain(s, NULL, 64, now, NULL))
		;
}

static void reasm_for(struct gfcc_reasm *ra, uint8_t **pages, uint64_t id, uint32_t n,
		      uint32_t seglen)
{
	struct gfcc_reasm_cfg c = { .id = id, .qkey = 0x1234, .psize = PS, .npage = n,
				    .seglen = seglen, .mode = GFCC_RA_UDP, .pages = pages };

	for (uint32_t i = 0; i < n; i++)
		pages[i] = calloc(1, PS);
	assert_int_equal(gfcc_reasm_init(ra, &c), 0);
}

static void check_pages(uint8_t **pages, uint64_t first, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		for (uint32_t o = 0; o < PS; o += 511)
			assert_int_equal(pages[i][o], pat(first + i, o));
		free(pages[i]);
	}
}

static void test_whole_reply(void **s_)
{
	struct ibc_srv *s = mk(GFCC_UDP, 9000, 0, 0);
	struct gfcc_reasm ra;
	struct ibc_srv_stats st;
	uint8_t b[GFCC_REQ_MAX], *pages[64];
	size_t len = req(b, 9, INO, 100, 64, 9000 - 16, 1000);

	reasm_for(&ra, pages, 9, 64, 9000 - 16);
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 0), 0);
	while (drain(s, &ra, 64, 0, NULL))
		;
	assert_true(ra.done);
	assert_int_equal(ra.got, ra.lay.nseg);
	check_pages(pages, 100, 64);
	ibc_srv_get_stats(s, &st);
	assert_int_equal(st.states, 1);
	assert_int_equal(st.segments_sent, ra.lay.nseg);
	assert_int_equal(st.pages_sent, 64);
	/* FIN frees it at once */
	len = ctl(b, 9, 0x1234, GFCC_X_FIN, 0, 0, NULL, 0);
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 1), 0);
	ibc_srv_get_stats(s, &st);
	assert_int_equal(st.states, 0);
	assert_int_equal(st.state_mem, 0);
	assert_int_equal(st.fins, 1);
	ibc_srv_free(s);
}

static void test_credit(void **s_)
{
	struct ibc_srv *s = mk(GFCC_UDP, 1500, 0, 0);
	uint8_t b[GFCC_REQ_MAX];
	size_t len = req(b, 3, INO, 0, 16, 1484, 4);

	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 0), 0);
	assert_int_equal(drain(s, NULL, 64, 0, NULL), 4);
	assert_int_equal(drain(s, NULL, 64, 0, NULL), 0);
	assert_false(ibc_srv_busy(s));
	len = ctl(b, 3, 0x1234, GFCC_X_CREDIT, 10, 0, NULL, 0);
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 1), 0);
	assert_int_equal(drain(s, NULL, 64, 1, NULL), 6);
	/* an older, smaller allow that arrives late takes nothing back */
	len = ctl(b, 3, 0x1234, GFCC_X_CREDIT, 7, 0, NULL, 0);
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 2), 0);
	assert_int_equal(drain(s, NULL, 64, 2, NULL), 0);
	/* the key is the requester's secret */
	len = ctl(b, 3, 0x4321, GFCC_X_CREDIT, 100, 0, NULL, 0);
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 3), -EPERM);
	assert_int_equal(drain(s, NULL, 64, 3, NULL), 0);
	/* another peer's request with the same id is another request */
	assert_int_equal(ibc_srv_input(s, (void *)2, b, len, 3), -ENOENT);
	ibc_srv_free(s);
}

static void test_resend(void **s_)
{
	struct ibc_srv *s = mk(GFCC_UDP, 1500, 0, 0);
	struct ibc_out keep[64];
	static const uint32_t segs[] = { 1, 3, 40 };
	uint8_t b[GFCC_REQ_MAX];
	size_t len = req(b, 4, INO, 0, 16, 1484, 20);
	int n;

	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 0), 0);
	assert_int_equal(drain(s, NULL, 64, 0, NULL), 20);
	/* 40 was never sent: it comes in order anyway, not as a resend */
	len = ctl(b, 4, 0x1234, GFCC_X_RESEND, 25, 0, segs, 3);
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 1), 0);
	n = drain(s, NULL, 64, 1, keep);
	assert_int_equal(n, 5);
	assert_true(keep[0].resend && keep[0].seg == 1);
	assert_true(keep[1].resend && keep[1].seg == 3);
	assert_true(!keep[2].resend && keep[2].seg == 20);
	{
		struct ibc_srv_stats st;

		ibc_srv_get_stats(s, &st);
		assert_int_equal(st.resent, 2);
		assert_int_equal(st.resend_msgs, 1);
	}
	ibc_srv_free(s);
}

/* The copy's size goes in the response to a requester that sent xprt's
 * extension, also in an empty reply; not to gfarm's (no extension), and
 * not when the store does not know it or it is too big for the field. */
static void test_size_told(void **s_)
{
	struct ibc_srv *s = mk(GFCC_UDP, 65507, 0, 0);
	struct ibc_out out[4];
	struct gfcc_res r;
	uint8_t b[GFCC_REQ_MAX];
	size_t len;

	store_size = 10000;
	len = req(b, 1, INO, 0, 3, 65000, 0);
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 0), 0);
	assert_int_equal(ibc_srv_pump(s, out, 4, 0), 1);
	assert_int_equal(gfcc_res_decode(out[0].buf, out[0].len, &r), 0);
	assert_true(r.has_size && r.size == 10000 && r.npage == 3);
	held = 2;	/* an empty reply: the pages asked for lie past its copy */
	len = req(b, 2, INO, 5, 2, 65000, 0);
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 0), 0);
	assert_int_equal(ibc_srv_pump(s, out, 4, 0), 1);
	assert_int_equal(gfcc_res_decode(out[0].buf, out[0].len, &r), 0);
	assert_true(r.has_size && r.size == 10000 && r.npage == 0);
	/* gfarm's request: the pad stays 0 */
	len = req(b, 3, INO, 0, 1, 65000, 0) - GFCC_REQ_EXT_LEN;
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 0), 0);
	assert_int_equal(ibc_srv_pump(s, out, 4, 0), 1);
	assert_int_equal(gfcc_res_decode(out[0].buf, out[0].len, &r), 0);
	assert_false(r.has_size);
	assert_int_equal(out[0].buf[5] | out[0].buf[28] | out[0].buf[29], 0);
	for (int i = 0; i < 2; i++) {
		store_size = i ? GFCC_RES_SIZE_MAX + 1 : UINT64_MAX;
		len = req(b, 4 + (uint64_t)i, INO, 0, 1, 65000, 0);
		assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 0), 0);
		assert_int_equal(ibc_srv_pump(s, out, 4, 0), 1);
		assert_int_equal(gfcc_res_decode(out[0].buf, out[0].len, &r), 0);
		assert_false(r.has_size);
	}
	store_size = UINT64_MAX;
	ibc_srv_free(s);
}

static void test_errors(void **s_)
{
	struct ibc_srv *s = mk(GFCC_UDP, 1500, 0, 0);
	struct ibc_out out[4];
	struct ibc_srv_stats st;
	struct gfcc_res r;
	uint8_t b[GFCC_REQ_MAX];
	size_t len;

	len = req(b, 5, STALE, 0, 4, 1484, 8);
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 0), -ESTALE);
	assert_int_equal(ibc_srv_pump(s, out, 4, 0), 1);
	assert_int_equal(out[0].len, GFCC_RES_LEN);
	assert_int_equal(gfcc_res_decode(out[0].buf, out[0].len, &r), 0);
	assert_int_equal(r.err, ESTALE);
	assert_int_equal(r.npage, 0);
	len = req(b, 6, 99, 0, 4, 1484, 8);
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 0), -ENOENT);
	assert_int_equal(ibc_srv_pump(s, out, 4, 0), 1);
	assert_int_equal(gfcc_res_decode(out[0].buf, out[0].len, &r), 0);
	assert_int_equal(r.err, ENOENT);
	/* more blocks than gfarm allows: E2BIG back, not silence */
	len = req(b, 7, INO, 0, 4, 1484, 8);
	b[68] = 200;
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 0), -E2BIG);
	assert_int_equal(ibc_srv_pump(s, out, 4, 0), 1);
	assert_int_equal(gfcc_res_decode(out[0].buf, out[0].len, &r), 0);
	assert_int_equal(r.err, E2BIG);
	/* a page size gfarm does not serve: ENXIO, its code */
	len = req(b, 8, INO, 0, 4, 1484, 8);
	b[60] = 0x10;	/* 4096 -> 4112 */
	assert_true(ibc_srv_input(s, (void *)1, b, len, 0) < 0);
	assert_int_equal(ibc_srv_pump(s, out, 4, 0), 1);
	assert_int_equal(gfcc_res_decode(out[0].buf, out[0].len, &r), 0);
	assert_int_equal(r.err, ENXIO);
	/* segments bigger than this endpoint can send */
	len = req(b, 9, INO, 0, 4, 9000, 8);
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 0), -EMSGSIZE);
	assert_int_equal(ibc_srv_pump(s, out, 4, 0), 1);
	/* junk and truncation: dropped and counted */
	assert_int_equal(ibc_srv_input(s, (void *)1, "hello world", 11, 0), -EPROTO);
	assert_int_equal(ibc_srv_input(s, (void *)1, b, 40, 0), -EMSGSIZE);
	assert_int_equal(ibc_srv_pump(s, out, 4, 0), 0);
	ibc_srv_get_stats(s, &st);
	assert_int_equal(st.stale, 1);
	assert_int_equal(st.not_found, 1);
	assert_int_equal(st.bad_requests, 3);
	assert_int_equal(st.foreign, 1);
	assert_int_equal(st.states, 0);
	ibc_srv_free(s);
}

static void test_short_dup(void **s_)
{
	struct ibc_srv *s = mk(GFCC_UDP, 65507, 0, 0);
	struct gfcc_reasm ra;
	struct ibc_srv_stats st;
	uint8_t b[GFCC_REQ_MAX], *pages[8];
	size_t len = req(b, 11, INO, 2, 8, 65491, 64);

	held = 5;	/* pages 0..4 */
	reasm_for(&ra, pages, 11, 8, 65491);
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 0), 0);
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 0), -EALREADY);
	while (drain(s, &ra, 64, 0, NULL))
		;
	assert_true(ra.done);
	assert_int_equal(ra.lay.npage, 3);	/* 2, 3, 4 */
	check_pages(pages, 2, 3);
	for (int i = 3; i < 8; i++)
		free(pages[i]);
	ibc_srv_get_stats(s, &st);
	assert_int_equal(st.short_replies, 1);
	assert_int_equal(st.dup_requests, 1);
	/* one datagram: nothing kept (a lost one is asked for again) */
	assert_int_equal(ibc_srv_pump(s, NULL, 0, 1), 0);
	ibc_srv_get_stats(s, &st);
	assert_int_equal(st.states, 0);
	ibc_srv_free(s);
}

static void test_ttl(void **s_)
{
	struct ibc_srv *s = mk(GFCC_UDP, 1500, 0, 0);
	struct ibc_srv_stats st;
	uint8_t b[GFCC_REQ_MAX];
	size_t len = req(b, 12, INO, 0, 16, 1484, 1000);

	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 0), 0);
	while (drain(s, NULL, 64, 0, NULL))
		;
	assert_true(ibc_srv_timer(s, 50 * MS) == 100 * MS);
	ibc_srv_get_stats(s, &st);
	assert_int_equal(st.states, 1);
	assert_true(ibc_srv_timer(s, 100 * MS) == UINT64_MAX);
	ibc_srv_get_stats(s, &st);
	assert_int_equal(st.states, 0);
	assert_int_equal(st.expired, 1);
	assert_int_equal(st.state_mem, 0);
	/* a RESEND for it now finds nothing */
	len = ctl(b, 12, 0x1234, GFCC_X_CREDIT, 2000, 0, NULL, 0);
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 101 * MS), -ENOENT);
	ibc_srv_free(s);
}

/* The counters of refused, evicted and held requests. */
static void expect_held(struct ibc_srv *s, uint64_t refused, uint64_t evicted, uint64_t states)
{
	struct ibc_srv_stats st;

	ibc_srv_get_stats(s, &st);
	assert_int_equal(st.refused, refused);
	assert_int_equal(st.evicted, evicted);
	assert_int_equal(st.states, states);
}

/* A full request (256 pages, window 1) from peer: its input's result. */
static int ask_full(struct ibc_srv *s, uintptr_t peer, uint64_t id)
{
	uint8_t b[GFCC_REQ_MAX];
	size_t len = req(b, id, INO, 0, 256, 65491, 1);

	return ibc_srv_input(s, (void *)peer, b, len, 0);
}

static void test_limits(void **s_)
{
	struct ibc_srv *s = mk(GFCC_UDP, 1500, 2, 0);
	struct ibc_out out[4];
	struct gfcc_res r;
	uint8_t b[GFCC_REQ_MAX];
	size_t len;

	/* two requests held, neither wholly sent (credit 1), of two
	 * requesters (one may hold a quarter: here one request) */
	len = req(b, 1, INO, 0, 16, 1484, 1);
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 0), 0);
	len = req(b, 2, INO, 0, 16, 1484, 1);
	assert_int_equal(ibc_srv_input(s, (void *)2, b, len, 1), 0);
	assert_int_equal(drain(s, NULL, 64, 1, NULL), 2);
	len = req(b, 3, INO, 0, 16, 1484, 1);
	assert_int_equal(ibc_srv_input(s, (void *)3, b, len, 2), -ENOMEM);
	assert_int_equal(ibc_srv_pump(s, out, 4, 2), 1);
	assert_int_equal(gfcc_res_decode(out[0].buf, out[0].len, &r), 0);
	assert_int_equal(r.err, ENOMEM);
	/* request 1 wholly sent: it makes room for the next */
	send_all_of_1(s, (void *)1, 3);
	len = req(b, 4, INO, 0, 16, 1484, 1);
	assert_int_equal(ibc_srv_input(s, (void *)3, b, len, 4), 0);
	expect_held(s, 1, 1, 2);
	ibc_srv_free(s);

	/* memory: 1 MiB + a bit per 256-page request */
	s = mk(GFCC_UDP, 65507, 0, 3u << 20);
	for (int i = 0; i < 3; i++)
		assert_int_equal(ask_full(s, 1 + (uintptr_t)i, 10 + (uint64_t)i), i < 2 ? 0 : -ENOMEM);
	ibc_srv_free(s);
	/* the least max_mem takes one full request; less is refused, not
	 * a server that refuses them all */
	s = mk(GFCC_UDP, 65507, 0, IBC_SRV_MEM_MIN);
	assert_int_equal(ask_full(s, 1, 20), 0);
	ibc_srv_free(s);
	{
		struct ibc_srv_cfg c = { .flavour = GFCC_UDP, .mtu = 65507,
					 .max_mem = IBC_SRV_MEM_MIN - 1 };

		errno = 0;
		assert_null(ibc_srv_new(&c, store, NULL));
		assert_int_equal(errno, EINVAL);
	}
}

/* One requester holds at most a quarter of the states and of the memory:
 * one that never grants credit (its replies wait, never dropped) cannot
 * shut out the others; at its share its own wholly sent replies make
 * room for it first. */
static void test_peer_share(void **s_)
{
	struct ibc_srv *s = mk(GFCC_UDP, 65507, 8, 0);
	struct ibc_out out[4];
	struct gfcc_res r;
	uint8_t b[GFCC_REQ_MAX];
	size_t len;

	for (int i = 0; i < 4; i++) {
		len = req(b, 1 + (uint64_t)i, INO, 0, 16, 1484, 1);
		assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 0), i < 2 ? 0 : -ENOMEM);
	}
	assert_int_equal(drain(s, NULL, 64, 0, NULL), 4);	/* 2 first windows, 2 ENOMEM */
	for (int p = 2; p < 5; p++) {
		len = req(b, 1, INO, 0, 16, 1484, 1);
		assert_int_equal(ibc_srv_input(s, (void *)(uintptr_t)p, b, len, 1), 0);
	}
	/* request 1 of requester 1 wholly sent: its next one replaces it */
	send_all_of_1(s, (void *)1, 2);
	len = req(b, 9, INO, 0, 16, 1484, 1);
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 3), 0);
	assert_int_equal(ibc_srv_pump(s, out, 4, 3), 1);
	assert_int_equal(gfcc_res_decode(out[0].buf, GFCC_RES_LEN, &r), 0);
	assert_true(r.id == 9 && r.err == 0);
	expect_held(s, 2, 1, 5);
	ibc_srv_free(s);

	/* the one reply it held, wholly sent, makes room for its next */
	s = mk(GFCC_UDP, 65507, 4, 0);
	len = req(b, 1, INO, 0, 16, 1484, 1000);
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 0), 0);
	while (drain(s, NULL, 64, 0, NULL))
		;
	len = req(b, 2, INO, 0, 16, 1484, 1000);
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 1), 0);
	expect_held(s, 0, 1, 1);
	ibc_srv_free(s);

	/* memory: 8 MiB, 2 MiB a requester; 1 MiB + 32 bytes a request */
	s = mk(GFCC_UDP, 65507, 0, 8u << 20);
	for (int i = 0; i < 3; i++)
		assert_int_equal(ask_full(s, 1, 10 + (uint64_t)i), i < 1 ? 0 : -ENOMEM);
	for (uintptr_t p = 2; p < 8; p++)
		assert_int_equal(ask_full(s, p, 10), 0);
	expect_held(s, 2, 0, 7);
	ibc_srv_free(s);
}

/* Peers in these tests are small numbers; with hosts, 0xHPP is port PP
 * of host H. */
static size_t host_of(const void *peer, uint8_t key[IBC_SRV_HOST_MAX])
{
	key[0] = (uint8_t)((uintptr_t)peer >> 8);
	return 1;
}

static struct ibc_srv *mk_hosts(uint32_t states, uint64_t mem)
{
	struct ibc_srv_cfg c = { .flavour = GFCC_UDP, .mtu = 65507, .max_states = states,
				 .max_mem = mem, .ttl_ns = 100 * MS, .burst = 8,
				 .host = host_of };
	struct ibc_srv *s = ibc_srv_new(&c, store, NULL);

	assert_non_null(s);
	held = 1000;
	return s;
}

/* The share is one host's, not one socket's: the requesters on one host
 * (other ports) hold a quarter together, so that a host cannot take
 * everything by opening four sockets, while another host is still
 * served; at its share the host's own wholly sent replies, whichever
 * port they went to, make room first. */
static void test_host_share(void **s_)
{
	struct ibc_srv *s = mk_hosts(8, 0);
	uint8_t b[GFCC_REQ_MAX];
	size_t len;

	for (uintptr_t p = 0x101; p <= 0x104; p++) {
		len = req(b, 1, INO, 0, 16, 1484, 1);
		assert_int_equal(ibc_srv_input(s, (void *)p, b, len, 0), p <= 0x102 ? 0 : -ENOMEM);
	}
	len = req(b, 1, INO, 0, 16, 1484, 1);
	assert_int_equal(ibc_srv_input(s, (void *)0x201, b, len, 0), 0);
	assert_int_equal(ibc_srv_input(s, (void *)0x302, b, len, 0), 0);
	expect_held(s, 2, 0, 4);
	while (drain(s, NULL, 64, 1, NULL))
		;
	/* port 1's reply wholly sent: port 3 of the same host takes its room */
	send_all_of_1(s, (void *)0x101, 2);
	len = req(b, 2, INO, 0, 16, 1484, 1);
	assert_int_equal(ibc_srv_input(s, (void *)0x103, b, len, 3), 0);
	expect_held(s, 2, 1, 4);
	/* a host that held its share and let it go has it whole again */
	len = ctl(b, 1, 0x1234, GFCC_X_FIN, 0, 0, NULL, 0);
	assert_int_equal(ibc_srv_input(s, (void *)0x102, b, len, 4), 0);
	len = ctl(b, 2, 0x1234, GFCC_X_FIN, 0, 0, NULL, 0);
	assert_int_equal(ibc_srv_input(s, (void *)0x103, b, len, 4), 0);
	len = req(b, 3, INO, 0, 16, 1484, 1);
	assert_int_equal(ibc_srv_input(s, (void *)0x104, b, len, 5), 0);
	assert_int_equal(ibc_srv_input(s, (void *)0x105, b, len, 5), 0);
	assert_int_equal(ibc_srv_input(s, (void *)0x106, b, len, 5), -ENOMEM);
	expect_held(s, 3, 1, 4);
	ibc_srv_free(s);

	/* memory: 8 MiB, 2 MiB a host; 1 MiB + 32 bytes a request */
	s = mk_hosts(0, 8u << 20);
	for (uintptr_t p = 0x101; p <= 0x104; p++)
		assert_int_equal(ask_full(s, p, 10), p == 0x101 ? 0 : -ENOMEM);
	assert_int_equal(ask_full(s, 0x201, 10), 0);
	expect_held(s, 3, 0, 2);
	ibc_srv_free(s);
}

static void test_round_robin_unsent(void **s_)
{
	struct ibc_srv *s = mk(GFCC_UDP, 1500, 0, 0);
	struct ibc_out out[64];
	uint8_t b[GFCC_REQ_MAX];
	size_t len;
	int n;

	len = req(b, 1, INO, 0, 16, 1484, 1000);
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 0), 0);
	len = req(b, 2, INO, 0, 16, 1484, 1000);
	assert_int_equal(ibc_srv_input(s, (void *)2, b, len, 0), 0);
	/* burst 8: eight of one, eight of the other */
	n = ibc_srv_pump(s, out, 20, 0);
	assert_int_equal(n, 20);
	assert_true(out[0].peer == (void *)1 && out[7].peer == (void *)1);
	assert_true(out[8].peer == (void *)2 && out[15].peer == (void *)2);
	assert_true(out[16].peer == (void *)1 && out[16].seg == 8);
	/* the queue took only 10: what did not go comes again, nothing
	 * skipped -- request 2 from segment 2 on, request 1 from 8 on */
	ibc_srv_unsent(s, out + 10, 10);
	n = ibc_srv_pump(s, out + 10, 10, 0);
	assert_int_equal(n, 10);
	assert_true(out[10].peer == (void *)2 && out[10].seg == 2);
	assert_true(out[17].peer == (void *)2 && out[17].seg == 9);
	assert_true(out[18].peer == (void *)1 && out[18].seg == 8);
	ibc_srv_free(s);
}

static void test_ud(void **s_)
{
	struct ibc_srv *s = mk(GFCC_UD, 1024, 0, 0);
	struct ibc_out out[64];
	struct ibc_srv_stats st;
	struct gfcc_res r;
	uint8_t b[GFCC_REQ_MAX];
	size_t len = req(b, 21, INO, 0, 4, 1024, 0);
	int n, total = 0;

	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 0), 0);
	while ((n = ibc_srv_pump(s, out, 64, 0)) > 0) {
		for (int i = 0; i < n; i++) {
			assert_int_equal(out[i].hlen, 0);	/* no header over UD */
			assert_int_equal(out[i].qkey, 0x1234);	/* the requester's key */
		}
		if (!total) {
			assert_int_equal(gfcc_res_decode(out[0].buf, out[0].len, &r), 0);
			assert_int_equal(r.nseg, (32 + 4 * PS + 1023) / 1024);
		}
		total += n;
	}
	assert_int_equal(total, 17);
	/* gfarm's way: nothing kept once sent */
	ibc_srv_timer(s, 1);
	ibc_srv_get_stats(s, &st);
	assert_int_equal(st.states, 0);
	/* without the extension, gfarm's MTU - 40 */
	{
		struct gfcc_req q;

		assert_int_equal(gfcc_req_decode(b, len, &q), 0);
		q.has_ext = false;
		q.id = 22;
		len = (size_t)gfcc_req_encode(&q, b, sizeof(b));
	}
	assert_int_equal(ibc_srv_input(s, (void *)1, b, len, 0), 0);
	n = ibc_srv_pump(s, out, 64, 0);
	assert_int_equal(out[0].len, 1024 - 40);
	ibc_srv_free(s);
}

int main(void)
{
	const struct CMUnitTest t[] = {
		cmocka_unit_test(test_whole_reply),
		cmocka_unit_test(test_credit),
		cmocka_unit_test(test_resend),
		cmocka_unit_test(test_size_told),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_short_dup),
		cmocka_unit_test(test_ttl),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_peer_share),
		cmocka_unit_test(test_host_share),
		cmocka_unit_test(test_round_robin_unsent),
		cmocka_unit_test(test_ud),
	};

	return cmocka_run_group_tests(t, NULL, NULL);
}
