/* ibcache over ud:// on a real UD QP (tests/vm/xprt-vm; skips with the
 * reason elsewhere): caller-posted scatter receives (GRH, response, page
 * pieces), a Q_Key per request that the device enforces, a QP reset that
 * drops what was posted, and the requester's pool against a responder
 * thread: reuse, short replies, reaping, late datagrams of a reaped
 * request kept out of the next one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/xtime.h"
#include "ibcache/ibc_req.h"
#include "ibcache/ibc_srv.h"
#include "xprt/xdg.h"
#include "rdma_test.h"
#include "ibc_test_responder.h"

#define MS	1000000ull

static struct xdg *open_ep(bool user_rx, uint32_t depth)
{
	struct xdg_opts o = { .user_rx = user_rx, .rx_depth = depth, .rx_sge = 4 };

	return rdma_test_ud_open(&o);
}

/* Polls b until a RECV comes or ms pass; the completion in *w. */
static bool recv_one(struct xdg *b, struct xdg_wc *w, int ms)
{
	uint64_t end = xtime_ns() + (uint64_t)ms * MS;

	while (xtime_ns() < end) {
		int n = xdg_poll(b, w, 1);

		if (n == 1 && w->op == XDG_OP_RECV)
			return true;
		if (!n)
			xdg_wait(b, MS);
	}
	return false;
}

struct poller {
	struct xdg *d;
	atomic_bool stop;
};

static void *poll_main(void *p)
{
	struct poller *pl = p;

	while (!atomic_load(&pl->stop)) {
		xdg_poll(pl->d, NULL, 0);
		xdg_wait(pl->d, 10 * MS);
	}
	return NULL;
}

static struct xdg_addr *resolve(struct xdg *a, struct xdg *b)
{
	struct poller pl = { .d = b };
	struct xdg_addr *r;
	struct xuri u;
	pthread_t t;
	char err[256];

	rdma_test_uri(&u, XURI_UD, rdma_test_ip(), xdg_port(b));
	pthread_create(&t, NULL, poll_main, &pl);
	r = xdg_resolve(a, &u, err, sizeof(err));
	atomic_store(&pl.stop, true);
	pthread_join(t, NULL);
	if (!r)
		fail_msg("resolve: %s", err);
	return r;
}

/* The seed's receive layout and the per-datagram Q_Key, at the verbs level. */
static void test_scatter_qkey_reset(void **s)
{
	struct xdg *a, *b;
	struct xdg_addr *to;
	struct xdg_mem *m;
	struct xdg_wc w;
	uint8_t *mem = aligned_alloc(4096, 8192), msg[300];
	char err[256];

	RDMA_OR_SKIP();
	a = open_ep(false, 16);
	b = open_ep(true, 8);
	to = resolve(a, b);
	m = xdg_mem_reg(b, mem, 8192, err, sizeof(err));
	assert_non_null(m);
	assert_int_equal(xdg_set_qkey(b, 0x1111), 0);
	/* GRH, then 100 bytes here, the rest 5000 bytes further on */
	struct xdg_sge g[3] = { { mem, 40, m }, { mem + 64, 100, m }, { mem + 5000, 200, m } };
	struct xdg_rwr wr = { g, 3, 7 };

	assert_int_equal(xdg_post_recv(b, &wr, 1), 1);
	for (int i = 0; i < 300; i++)
		msg[i] = (uint8_t)i;
	/* the wrong key: the device drops it, nothing completes */
	struct xdg_dgram dg = { .to = to, .buf = msg, .len = 300, .qkey = 0x2222 };

	assert_int_equal(xdg_send_dgrams(a, &dg, 1, 0), 1);
	assert_false(recv_one(b, &w, 200));
	dg.qkey = 0x1111;
	assert_int_equal(xdg_send_dgrams(a, &dg, 1, 0), 1);
	assert_true(recv_one(b, &w, 2000));
	assert_int_equal(w.status, 0);
	assert_int_equal(w.len, 300);
	assert_true(w.wr_id == 7 && w.data == NULL);
	assert_int_equal(mem[64], 0);
	assert_int_equal(mem[64 + 99], 99);
	assert_int_equal(mem[5000], 100);
	assert_int_equal(mem[5000 + 199], (uint8_t)299);
	/* a reset drops what is posted: nothing lands, nothing completes */
	assert_int_equal(xdg_post_recv(b, &wr, 1), 1);
	assert_int_equal(xdg_reset(b, 0x3333), 0);
	memset(mem, 0, 8192);
	dg.qkey = 0x3333;
	assert_int_equal(xdg_send_dgrams(a, &dg, 1, 0), 1);
	assert_false(recv_one(b, &w, 200));
	assert_int_equal(mem[5000], 0);
	/* and the QP works again once receives are posted */
	assert_int_equal(xdg_post_recv(b, &wr, 1), 1);
	assert_int_equal(xdg_send_dgrams(a, &dg, 1, 0), 1);
	assert_true(recv_one(b, &w, 2000));
	assert_int_equal(mem[5000], 100);
	/* scatter lists outside the registration are refused */
	g[2].addr = mem + 8100;
	assert_int_equal(xdg_post_recv(b, &wr, 1), -EINVAL);
	xdg_mem_dereg(m);
	xdg_close(b);
	xdg_close(a);
	free(mem);
}

/* --- the pool against a responder thread ---------------------------------- */

static struct responder *srv_start(void)
{
	struct xdg_opts o = { .tx_depth = 1024 };
	struct xdg *d = rdma_test_ud_open(&o);
	struct ibc_srv_cfg c = { .flavour = GFCC_UD, .mtu = d ? xdg_mtu(d) : 0 };

	return resp_start(d, &c, 2048);
}

static int wait_done(struct ibc_req *q, struct ibc_done *d)
{
	int n;

	do
		n = ibc_req_poll(q, d, 1, 5000 * MS);
	while (n == 0);
	return n;
}

static void test_pool(void **s)
{
	struct responder *st;
	struct ibc_req_opts o = { .depth = 1, .timeout_ns = 3000 * MS };
	struct ibc_req *q;
	struct ibc_req_stats rs;
	struct ibc_done d;
	struct xuri u;
	uint8_t *mem, *dst[64];
	uint64_t pg[64];
	char err[256];
	int peer;

	RDMA_OR_SKIP();
	st = srv_start();
	q = ibc_req_new(&o);
	rdma_test_uri(&u, XURI_UD, rdma_test_ip(), xdg_port(st->d));
	peer = ibc_req_add_peer(q, &u, err, sizeof(err));
	if (peer < 0)
		fail_msg("add peer: %s", err);
	mem = aligned_alloc(4096, 64 * PS);
	assert_int_equal(ibc_req_register(q, mem, 64 * PS, err, sizeof(err)), 0);
	for (int i = 0; i < 64; i++)
		dst[i] = mem + (size_t)i * PS;
	/* ten requests, one QP, the pages where they belong */
	for (int r = 0; r < 10; r++) {
		for (int i = 0; i < 16; i++)
			pg[i] = (uint64_t)r * 100 + (uint64_t)i * 2;	/* 16 blocks */
		memset(mem, 0, 64 * PS);
		assert_int_equal(ibc_req_submit(q, peer, INO, GEN, pg, 16, dst, 1), 16);
		assert_int_equal(wait_done(q, &d), 1);
		assert_int_equal(d.err, 0);
		assert_int_equal(d.nok, 16);
		for (int i = 0; i < 16; i++)
			for (uint32_t off = 0; off < PS; off += 331)
				assert_int_equal(dst[i][off], pat(pg[i], off));
	}
	ibc_req_get_stats(q, &rs);
	assert_int_equal(rs.endpoints, 1);
	assert_int_equal(rs.resets, 0);
	/* a short reply leaves receives posted: the QP is reset at once */
	held = 5;
	for (int i = 0; i < 8; i++)
		pg[i] = (uint64_t)i;
	assert_int_equal(ibc_req_submit(q, peer, INO, GEN, pg, 8, dst, 2), 8);
	assert_int_equal(wait_done(q, &d), 1);
	held = UINT64_MAX;
	assert_int_equal(d.reply_pages, 5);
	assert_int_equal(d.nok, 5);
	ibc_req_get_stats(q, &rs);
	assert_int_equal(rs.resets, 1);
	assert_int_equal(rs.short_replies, 1);
	/* reaped: the reply is held back; when it comes late, under the old
	 * Q_Key, the next request on the same QP must not see it */
	ibc_req_free(q);
	o.timeout_ns = 100 * MS;
	q = ibc_req_new(&o);
	peer = ibc_req_add_peer(q, &u, err, sizeof(err));
	assert_int_equal(ibc_req_register(q, mem, 64 * PS, err, sizeof(err)), 0);
	atomic_store(&st->mode, RESP_HOLD);
	assert_int_equal(ibc_req_submit(q, peer, INO, GEN, pg, 8, dst, 3), 8);
	assert_int_equal(wait_done(q, &d), 1);
	assert_int_equal(d.err, -ETIMEDOUT);
	assert_int_equal(d.nok, 0);
	atomic_store(&st->mode, RESP_NORMAL);
	for (int i = 0; i < 8; i++)
		pg[i] = 1000 + (uint64_t)i;
	memset(mem, 0, 64 * PS);
	assert_int_equal(ibc_req_submit(q, peer, INO, GEN, pg, 8, dst, 4), 8);
	resp_flush(st);
	assert_int_equal(wait_done(q, &d), 1);
	assert_int_equal(d.err, 0);
	for (int i = 0; i < 8; i++)
		for (uint32_t off = 0; off < PS; off += 331)
			assert_int_equal(dst[i][off], pat(pg[i], off));
	ibc_req_get_stats(q, &rs);
	assert_int_equal(rs.endpoints, 1);
	assert_int_equal(rs.reaped, 1);
	ibc_req_free(q);
	free(mem);
	resp_stop(st);
}

int main(void)
{
	const struct CMUnitTest t[] = {
		cmocka_unit_test(test_scatter_qkey_reset),
		cmocka_unit_test(test_pool),
	};

	return cmocka_run_group_tests(t, NULL, NULL);
}
