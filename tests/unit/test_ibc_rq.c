/* The requester's per-request engine (ibc_rq.h) against the responder's
 * (ibc_srv.h) over a simulated network with deterministic loss and a
 * virtual clock: byte-exact under loss both ways, credits bounding what
 * is in flight, reaping in milliseconds, short and error replies, page
 * block lists, foreign datagrams, and UD's all-or-nothing rule. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ibcache/ibc_rq.h"
#include "ibcache/ibc_srv.h"
#include "ibc_test_store.h"

#define MS	1000000ull
#define PEER	((void *)0x10)

struct net {
	struct ibc_srv *s;
	struct ibc_rq r;
	uint64_t now;
	uint64_t rnd;
	int loss_up, loss_down;		/* percent: requester->responder, back */
	int64_t srv_budget;		/* datagrams the responder sends before it dies */
	uint32_t max_batch;		/* most datagrams the responder had out at once */
	uint8_t req[GFCC_REQ_MAX];
	int reqlen;
	uint8_t *pages[GFCC_PAGES_MAX];
	uint64_t pgno[GFCC_PAGES_MAX];
};

static bool drop(struct net *n, int pct)
{
	/* xorshift64*: an LCG's low-quality pairs made whole runs of the same
	 * fate for a request and its reply */
	n->rnd ^= n->rnd >> 12;
	n->rnd ^= n->rnd << 25;
	n->rnd ^= n->rnd >> 27;
	return (int)((n->rnd * 0x2545f4914f6cdd1dull >> 33) % 100) < pct;
}

static void up(struct net *n, const void *b, size_t len)
{
	if (!drop(n, n->loss_up))
		ibc_srv_input(n->s, PEER, b, len, n->now);
}

static void send_out(struct net *n, const struct ibc_rq_out *o)
{
	if (o->request)
		up(n, n->req, (size_t)n->reqlen);
	for (int i = 0; i < o->n; i++)
		up(n, o->msg[i], o->len[i]);
}

static void setup_net(struct net *n, enum gfcc_flavour f, uint32_t mtu, uint32_t window,
		      const uint64_t *pages, uint32_t np, uint32_t max_pblk, int expect_taken)
{
	/* the responder keeps a request longer than the requester waits for
	 * it (ibcache-serve --ttl > ibcache-fetch --timeout) */
	struct ibc_srv_cfg sc = { .flavour = f, .mtu = mtu, .ttl_ns = 10000 * MS };
	struct ibc_rq_cfg c = { .id = 77, .qkey = 0x55aa, .obj = { .ino = INO, .gen = GEN },
				.psize = PS, .pages = pages, .npages = np, .max_pblk = max_pblk,
				.flavour = f, .seglen = gfcc_seglen(mtu, f == GFCC_UD ? GFCC_UD : GFCC_UDP),
				.window = f == GFCC_UDP ? window : 0, .dst = n->pages,
				.rto_ns = 2 * MS, .timeout_ns = 5000 * MS, .now = 0 };

	memset(n, 0, sizeof(*n));
	n->rnd = 12345;
	n->srv_budget = INT64_MAX;
	for (uint32_t i = 0; i < np && i < GFCC_PAGES_MAX; i++)
		n->pages[i] = calloc(1, PS);
	n->s = ibc_srv_new(&sc, store, NULL);
	assert_non_null(n->s);
	assert_int_equal(ibc_rq_init(&n->r, &c), expect_taken);
	n->reqlen = ibc_rq_encode(&n->r, n->req, sizeof(n->req));
	assert_true(n->reqlen > 0);
	memcpy(n->pgno, pages, sizeof(*pages) * (size_t)(np < GFCC_PAGES_MAX ? np : GFCC_PAGES_MAX));
}

static void free_net(struct net *n)
{
	for (uint32_t i = 0; i < GFCC_PAGES_MAX; i++)
		free(n->pages[i]);
	ibc_srv_free(n->s);
}

/* Until the request is over: the responder sends all its credit allows
 * at once (each batch is what it had in flight), each datagram crosses
 * or not, the clock jumps to the next timer when nothing moves. */
static void run(struct net *n)
{
	struct ibc_out out[1024];
	uint8_t dg[GFCC_SEGLEN_MAX + GFCC_DSEG_LEN];

	up(n, n->req, (size_t)n->reqlen);
	while (n->r.state == IBC_RQ_WAIT) {
		/* one pump: its buffers live until the next call into the engine */
		int k = ibc_srv_pump(n->s, out, 1024, n->now);

		if ((uint32_t)k > n->max_batch)
			n->max_batch = (uint32_t)k;
		for (int i = 0; i < k && n->r.state == IBC_RQ_WAIT; i++) {
			struct ibc_rq_out o;

			if (n->srv_budget-- <= 0 || drop(n, n->loss_down))
				continue;
			memcpy(dg, out[i].hdr, out[i].hlen);
			memcpy(dg + out[i].hlen, out[i].buf, out[i].len);
			ibc_rq_input(&n->r, dg, out[i].hlen + out[i].len, n->now, &o);
			send_out(n, &o);
		}
		if (!k) {
			struct ibc_rq_out o;

			n->now = ibc_rq_next_timer(&n->r, 0);
			ibc_rq_timer(&n->r, n->now, 0, &o);
			send_out(n, &o);
			ibc_srv_timer(n->s, n->now);
		}
		n->now += 10000;	/* 10 us a round */
	}
}

static void check(struct net *n, uint32_t count, bool all)
{
	uint32_t good = 0;

	for (uint32_t i = 0; i < count; i++) {
		if (!ibc_rq_page_ok(&n->r, i)) {
			assert_false(all);
			continue;
		}
		good++;
		for (uint32_t o = 0; o < PS; o++)
			if (n->pages[i][o] != pat(n->pgno[i], o))
				fail_msg("page %u (file page %llu) byte %u differs", i,
					 (unsigned long long)n->pgno[i], o);
	}
	if (all)
		assert_int_equal(good, count);
}

static void seq_pages(uint64_t *p, uint64_t first, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		p[i] = first + i;
}

static void test_no_loss_credit(void **s_)
{
	uint64_t pg[256];
	struct net n;
	struct ibc_srv_stats st;

	seq_pages(pg, 1000, 256);
	setup_net(&n, GFCC_UDP, 1500, 64, pg, 256, GFCC_PBLK_MAX, 256);
	run(&n);
	assert_int_equal(n.r.state, IBC_RQ_DONE);
	assert_int_equal(n.r.err, 0);
	check(&n, 256, true);
	/* the window held: never more than 64 out before credit came back */
	assert_true(n.max_batch <= 64);
	assert_int_equal(n.r.retries, 0);
	assert_true(n.r.credits > 0);
	/* FIN freed the responder's state */
	ibc_srv_get_stats(n.s, &st);
	assert_int_equal(st.states, 0);
	assert_int_equal(st.fins, 1);
	assert_int_equal(st.resent, 0);
	free_net(&n);
}

static void test_loss(void **s_)
{
	static const int loss[] = { 5, 10, 30 };
	uint64_t pg[256];

	seq_pages(pg, 0, 256);
	for (size_t l = 0; l < sizeof(loss) / sizeof(loss[0]); l++)
		for (uint32_t seed = 1; seed <= 8; seed++) {
			struct net n;

			setup_net(&n, GFCC_UDP, 1500, 64, pg, 256, GFCC_PBLK_MAX, 256);
			n.rnd = seed * 7919;
			n.loss_up = n.loss_down = loss[l];
			run(&n);
			if (n.r.state != IBC_RQ_DONE)
				fail_msg("loss %d%% seed %u: state %d err %d, %u of %u segments",
					 loss[l], seed, n.r.state, n.r.err, n.r.ra.got, n.r.ra.lay.nseg);
			check(&n, 256, true);
			assert_true(n.r.fast_resends + n.r.retries > 0);
			assert_true(n.r.asked > 0);
			free_net(&n);
		}
}

/* A responder that answered and is heard from on the requester's other
 * requests is serving them: this one's silence waits its turn, up to
 * three rto more; heard from until 3 ms in, the wait ends 2 ms after;
 * heard from on nothing, or before it answered at all (the request may
 * be lost), it asks again after one rto (2 ms). */
static void test_turns(void **s_)
{
	static const struct { int first; uint64_t heard_until, fires; } c[] = {
		{ 1, 0, 2 * MS },		/* heard from on nothing */
		{ 1, UINT64_MAX, 8 * MS },	/* all along: 2 + 3 * 2 ms */
		{ 1, 3 * MS, 5 * MS },		/* until 3 ms in */
		{ 0, UINT64_MAX, 1 * MS },	/* nothing came: 2 ms after it went (0) */
	};
	struct ibc_out out[1024];
	uint8_t dg[GFCC_SEGLEN_MAX + GFCC_DSEG_LEN];
	uint64_t pg[256], last;
	struct net n;

	seq_pages(pg, 0, 256);
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		struct ibc_rq_out o;
		int k;

		setup_net(&n, GFCC_UDP, 1500, 64, pg, 256, GFCC_PBLK_MAX, 256);
		up(&n, n.req, (size_t)n.reqlen);
		n.now = 1 * MS;
		k = ibc_srv_pump(n.s, out, 1024, n.now);
		assert_int_equal(k, 64);	/* the first window */
		for (int j = 0; j < k && c[i].first; j++) {
			memcpy(dg, out[j].hdr, out[j].hlen);
			memcpy(dg + out[j].hlen, out[j].buf, out[j].len);
			ibc_rq_input(&n.r, dg, out[j].hlen + out[j].len, n.now, &o);
		}
		/* credit is not delivered: the responder has nothing to send
		 * and the requester hears nothing more of this request */
		last = n.now;
		for (uint64_t t = last; n.r.retries == 0 && t < last + 100 * MS; t += MS / 4) {
			uint64_t heard = t - last <= c[i].heard_until ? t : last + c[i].heard_until;

			if (!c[i].heard_until)
				heard = 0;
			ibc_rq_timer(&n.r, t, heard, &o);
			if (n.r.retries)
				n.now = t;
			else
				assert_true(ibc_rq_next_timer(&n.r, heard) > t);
		}
		assert_int_equal(n.r.retries, 1);
		if (n.now - last != c[i].fires)
			fail_msg("case %zu: asked again after %llu us, not %llu", i,
				 (unsigned long long)(n.now - last) / 1000,
				 (unsigned long long)c[i].fires / 1000);
		assert_true(c[i].first ? n.r.asked > 0 : o.request);
		free_net(&n);
	}
}

static void test_reaped_silent(void **s_)
{
	uint64_t pg[4];
	struct net n;

	seq_pages(pg, 0, 4);
	setup_net(&n, GFCC_UDP, 1500, 16, pg, 4, GFCC_PBLK_MAX, 4);
	n.loss_up = 100;	/* the responder never hears of it */
	run(&n);
	assert_int_equal(n.r.state, IBC_RQ_FAILED);
	assert_int_equal(n.r.err, -ETIMEDOUT);
	/* reaped at the deadline, not a round later */
	assert_true(n.now - 10000 == 5000 * MS);
	/* rto doubling up to timeout/8: a dozen or so tries, not hundreds */
	assert_true(n.r.retries >= 10 && n.r.retries <= 20);
	for (int i = 0; i < 4; i++)
		assert_false(ibc_rq_page_ok(&n.r, (uint32_t)i));
	free_net(&n);
}

static void test_reaped_partial(void **s_)
{
	uint64_t pg[64];
	struct net n;
	uint32_t good = 0;

	seq_pages(pg, 0, 64);
	setup_net(&n, GFCC_UDP, 9000, 1000, pg, 64, GFCC_PBLK_MAX, 64);
	n.srv_budget = 10;	/* dies after ten datagrams */
	run(&n);
	assert_int_equal(n.r.err, -ETIMEDOUT);
	/* over UDP what came whole is good */
	for (uint32_t i = 0; i < 64; i++)
		good += ibc_rq_page_ok(&n.r, i);
	assert_true(good >= 15 && good < 64);
	check(&n, 64, false);
	assert_false(ibc_rq_clean(&n.r));
	free_net(&n);
}

static void test_short_and_stale(void **s_)
{
	uint64_t pg[20];
	struct net n;

	seq_pages(pg, 0, 20);
	held = 10;
	setup_net(&n, GFCC_UDP, 1500, 64, pg, 20, GFCC_PBLK_MAX, 20);
	run(&n);
	held = UINT64_MAX;
	assert_int_equal(n.r.state, IBC_RQ_DONE);
	assert_int_equal(n.r.err, 0);
	assert_int_equal(ibc_rq_reply_pages(&n.r), 10);
	check(&n, 10, true);
	assert_false(ibc_rq_page_ok(&n.r, 10));
	assert_true(ibc_rq_clean(&n.r));
	free_net(&n);

	setup_net(&n, GFCC_UDP, 1500, 64, pg, 20, GFCC_PBLK_MAX, 20);
	n.r.req.obj.gen = GEN + 1;
	n.reqlen = ibc_rq_encode(&n.r, n.req, sizeof(n.req));
	run(&n);
	assert_int_equal(n.r.state, IBC_RQ_DONE);
	assert_int_equal(n.r.err, ESTALE);
	assert_false(ibc_rq_page_ok(&n.r, 0));
	free_net(&n);
}

static void test_blocks(void **s_)
{
	static const uint64_t pg[] = { 0, 1, 2, 5, 6, 9, 40, 41 };
	struct net n;
	uint64_t idx;

	setup_net(&n, GFCC_UDP, 1500, 64, pg, 8, GFCC_PBLK_MAX, 8);
	assert_int_equal(n.r.req.npblk, 4);
	assert_int_equal(gfcc_req_page(&n.r.req, 5, &idx), 0);
	assert_true(idx == 9);
	assert_true(n.r.req.obj.off == 0 && n.r.req.obj.len == 42 * PS);
	run(&n);
	check(&n, 8, true);
	free_net(&n);
	/* a request holds no more blocks than fit the MTU: the rest wait */
	setup_net(&n, GFCC_UDP, 1500, 64, pg, 8, 2, 5);
	assert_int_equal(n.r.req.npblk, 2);
	run(&n);
	check(&n, 5, true);
	free_net(&n);
}

static void test_foreign(void **s_)
{
	uint64_t pg[4];
	struct net n;
	struct ibc_rq_out o;
	uint8_t dg[64] = { 0 };
	struct gfcc_dseg d = { .id = 77, .qkey = 0x1111, .seg = 0, .npage = 4 };

	seq_pages(pg, 0, 4);
	setup_net(&n, GFCC_UDP, 1500, 16, pg, 4, GFCC_PBLK_MAX, 4);
	gfcc_dseg_encode(&d, dg);
	/* right id, wrong key: a stranger's, or an earlier request's */
	assert_int_equal(ibc_rq_input(&n.r, dg, sizeof(dg), 5, &o), -EPROTO);
	assert_int_equal(ibc_rq_input(&n.r, dg, 3, 5, &o), -EMSGSIZE);
	assert_int_equal(n.r.t_progress, 0);	/* not progress */
	assert_int_equal(n.r.ra.rejected, 2);
	run(&n);
	check(&n, 4, true);
	free_net(&n);
}

static void test_ud(void **s_)
{
	uint64_t pg[8];
	struct net n;

	seq_pages(pg, 0, 8);
	setup_net(&n, GFCC_UD, 1024, 0, pg, 8, GFCC_PBLK_MAX, 8);
	run(&n);
	assert_int_equal(n.r.state, IBC_RQ_DONE);
	check(&n, 8, true);
	assert_true(ibc_rq_clean(&n.r));
	free_net(&n);
	/* one segment lost: the positional scatter is wrong from there on,
	 * so nothing of it counts, and nothing is asked again on this QP */
	setup_net(&n, GFCC_UD, 1024, 0, pg, 8, GFCC_PBLK_MAX, 8);
	n.srv_budget = 20;
	run(&n);
	assert_int_equal(n.r.state, IBC_RQ_FAILED);
	assert_int_equal(n.r.err, -ETIMEDOUT);
	assert_int_equal(n.r.retries, 0);
	for (uint32_t i = 0; i < 8; i++)
		assert_false(ibc_rq_page_ok(&n.r, i));
	assert_false(ibc_rq_clean(&n.r));
	free_net(&n);
}

/* The kernel scattered each datagram where its segment goes (what the
 * pool does when it predicts right): nothing is copied, pages are good. */
static void test_placed_udp(void **s_)
{
	uint64_t pg[40];
	struct net n;
	struct ibc_out out[256];
	struct gfcc_piece pc[GFCC_PIECES_MAX(GFCC_SEGLEN_MAX, GFCC_PSIZE_MIN)];
	uint8_t res[GFCC_RES_LEN];
	int k;

	seq_pages(pg, 7, 40);
	setup_net(&n, GFCC_UDP, 9000, 64, pg, 40, GFCC_PBLK_MAX, 40);
	up(&n, n.req, (size_t)n.reqlen);
	k = ibc_srv_pump(n.s, out, 256, 0);
	assert_true(k > 10);
	for (int i = k - 1; i >= 0; i--) {	/* any order */
		struct ibc_rq_out o;
		const uint8_t *b = out[i].buf;
		int np = gfcc_seg_pieces(&n.r.ra.lay, out[i].seg, GFCC_PFX_NONE, pc, 64);

		for (int j = 0; j < np; j++) {
			uint8_t *to = pc[j].kind == GFCC_PC_RES ? res : n.pages[pc[j].page] + pc[j].off;

			memcpy(to, b, pc[j].len);
			b += pc[j].len;
		}
		assert_true(ibc_rq_input_hdr(&n.r, out[i].hdr, out[i].hlen + out[i].len, res, 1,
					     &o) >= 0);
	}
	assert_int_equal(n.r.state, IBC_RQ_DONE);
	check(&n, 40, true);
	assert_int_equal(n.r.ra.dups, 0);
	free_net(&n);
	/* someone else's header: refused, counted, nothing taken */
	setup_net(&n, GFCC_UDP, 9000, 64, pg, 4, GFCC_PBLK_MAX, 4);
	{
		struct gfcc_dseg d = { .id = 77, .qkey = 0x1111, .seg = 1, .npage = 4 };
		struct ibc_rq_out o;
		uint8_t h[GFCC_DSEG_LEN];

		gfcc_dseg_encode(&d, h);
		assert_int_equal(ibc_rq_input_hdr(&n.r, h, 100, res, 1, &o), -EPROTO);
		d.qkey = 0x55aa;
		d.seg = 0;
		gfcc_dseg_encode(&d, h);
		memset(res, 0, sizeof(res));	/* no response there */
		assert_int_equal(ibc_rq_input_hdr(&n.r, h, 100, res, 1, &o), -EPROTO);
		assert_int_equal(n.r.ra.rejected, 2);
		assert_int_equal(n.r.ra.got, 0);
	}
	free_net(&n);
}

static void test_bad_cfg(void **s_)
{
	uint64_t pg[2] = { 3, 3 };
	uint8_t *dst[2] = { (uint8_t *)pg, (uint8_t *)pg };
	struct ibc_rq r;
	struct ibc_rq_cfg c = { .id = 1, .qkey = 1, .psize = PS, .pages = pg, .npages = 2,
				.max_pblk = 10, .flavour = GFCC_UDP, .seglen = 1484, .window = 4,
				.dst = dst, .rto_ns = MS, .timeout_ns = MS };

	assert_int_equal(ibc_rq_init(&r, &c), -EINVAL);	/* not ascending */
	pg[1] = 4;
	c.window = 0;
	assert_int_equal(ibc_rq_init(&r, &c), -EINVAL);	/* UDP needs credit */
	c.window = 4;
	c.qkey = 0x80000000u;
	assert_int_equal(ibc_rq_init(&r, &c), -EINVAL);
	c.qkey = 9;
	assert_int_equal(ibc_rq_init(&r, &c), 2);
}

int main(void)
{
	const struct CMUnitTest t[] = {
		cmocka_unit_test(test_no_loss_credit),
		cmocka_unit_test(test_loss),
		cmocka_unit_test(test_turns),
		cmocka_unit_test(test_reaped_silent),
		cmocka_unit_test(test_reaped_partial),
		cmocka_unit_test(test_short_and_stale),
		cmocka_unit_test(test_blocks),
		cmocka_unit_test(test_foreign),
		cmocka_unit_test(test_ud),
		cmocka_unit_test(test_placed_udp),
		cmocka_unit_test(test_bad_cfg),
	};

	return cmocka_run_group_tests(t, NULL, NULL);
}
