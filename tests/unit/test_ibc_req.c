/* The requester's endpoint pool over real UDP sockets on loopback, with a
 * responder thread (ibc_srv on an xdg endpoint): endpoints reused, depth
 * honoured, reaping in milliseconds, a drained socket after an incomplete
 * reply and an earlier request's late datagrams dropped, a closed port
 * reported at once, requests of many page blocks. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include "core/xtime.h"
#include "ibcache/ibc_req.h"
#include "ibcache/ibc_srv.h"
#include "xprt/xdg.h"
#include "ibc_test_responder.h"

#define MS	1000000ull

static struct responder *srv_start(void)
{
	struct xuri u = { .scheme = XURI_UDP, .host = "127.0.0.1" };
	struct xdg_opts o = { .mtu = 9000 };
	struct ibc_srv_cfg c = { .flavour = GFCC_UDP, .mtu = 9000 };
	char err[256];

	return resp_start(xdg_open(&u, &o, err, sizeof(err)), &c, 64);
}

static struct ibc_req *req_new(struct responder *st, uint32_t depth, uint64_t timeout_ns, int *peer)
{
	struct ibc_req_opts o = { .depth = depth, .timeout_ns = timeout_ns, .mtu = 9000 };
	struct ibc_req *q = ibc_req_new(&o);
	struct xuri u = { .scheme = XURI_UDP, .host = "127.0.0.1", .port = xdg_port(st->d) };
	char err[256];

	assert_non_null(q);
	*peer = ibc_req_add_peer(q, &u, err, sizeof(err));
	assert_int_equal(*peer, 0);
	return q;
}

struct bufs {
	uint8_t *dst[GFCC_PAGES_MAX];
	uint64_t pg[GFCC_PAGES_MAX];
};

static void bufs_init(struct bufs *b, uint64_t first, uint64_t stride, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		b->dst[i] = calloc(1, PS);
		b->pg[i] = first + i * stride;
	}
}

static void bufs_check_free(struct bufs *b, const struct ibc_done *d, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		if (d) {
			assert_true(ibc_done_ok(d, i));
			for (uint32_t o = 0; o < PS; o += 97)
				assert_int_equal(b->dst[i][o], pat(b->pg[i], o));
		}
		free(b->dst[i]);
	}
}

static int wait_done(struct ibc_req *q, struct ibc_done *d)
{
	int n;

	do
		n = ibc_req_poll(q, d, 1, 5000 * MS);
	while (n == 0);
	return n;
}

static void test_reuse_depth(void **s_)
{
	struct responder *st = srv_start();
	struct ibc_req_stats rs;
	struct ibc_done d[4];
	struct bufs b[3];
	int peer;
	struct ibc_req *q = req_new(st, 2, 2000 * MS, &peer);

	for (int i = 0; i < 40; i++) {
		bufs_init(&b[0], (uint64_t)i * 10, 1, 10);
		assert_int_equal(ibc_req_submit(q, peer, INO, GEN, b[0].pg, 10, b[0].dst, 7), 10);
		assert_int_equal(wait_done(q, d), 1);
		assert_int_equal(d[0].err, 0);
		assert_true(d[0].tag == 7 && d[0].nok == 10);
		bufs_check_free(&b[0], d, 10);
	}
	ibc_req_get_stats(q, &rs);
	/* one request at a time: one endpoint, reused forty times */
	assert_int_equal(rs.endpoints, 1);
	assert_int_equal(rs.requests, 40);
	assert_int_equal(rs.pages_received, 400);
	/* two at a time at most */
	bufs_init(&b[0], 0, 1, 200);
	bufs_init(&b[1], 500, 1, 200);
	bufs_init(&b[2], 900, 1, 4);
	assert_int_equal(ibc_req_submit(q, peer, INO, GEN, b[0].pg, 200, b[0].dst, 0), 200);
	assert_int_equal(ibc_req_submit(q, peer, INO, GEN, b[1].pg, 200, b[1].dst, 1), 200);
	assert_int_equal(ibc_req_submit(q, peer, INO, GEN, b[2].pg, 4, b[2].dst, 2), -EBUSY);
	assert_int_equal(ibc_req_inflight(q), 2);
	for (int got = 0; got < 2;) {
		int n = ibc_req_poll(q, d, 4, 5000 * MS);

		for (int i = 0; i < n; i++) {
			assert_int_equal(d[i].err, 0);
			assert_int_equal(d[i].nok, 200);
			bufs_check_free(&b[d[i].tag], &d[i], 200);
		}
		got += n;
	}
	bufs_check_free(&b[2], NULL, 4);
	ibc_req_get_stats(q, &rs);
	assert_int_equal(rs.endpoints, 2);
	ibc_req_free(q);
	resp_stop(st);
}

static void test_reap_and_strays(void **s_)
{
	struct responder *st = srv_start();
	struct ibc_req_stats rs;
	struct ibc_done d;
	struct bufs b;
	int peer;
	struct ibc_req *q = req_new(st, 1, 50 * MS, &peer);
	uint64_t t0;

	/* the responder keeps the reply: reaped after the 50 ms timer */
	atomic_store(&st->mode, RESP_HOLD);
	bufs_init(&b, 0, 1, 8);
	t0 = xtime_ns();
	assert_int_equal(ibc_req_submit(q, peer, INO, GEN, b.pg, 8, b.dst, 1), 8);
	assert_int_equal(wait_done(q, &d), 1);
	assert_int_equal(d.err, -ETIMEDOUT);
	assert_int_equal(d.nok, 0);
	assert_true(xtime_ns() - t0 >= 50 * MS && xtime_ns() - t0 < 1000 * MS);
	bufs_check_free(&b, NULL, 8);
	/* the same endpoint again; the first reply arrives now, late: its
	 * datagrams (old id and key) must not land in the new request */
	resp_flush(st);
	usleep(20000);
	bufs_init(&b, 100, 1, 8);
	assert_int_equal(ibc_req_submit(q, peer, INO, GEN, b.pg, 8, b.dst, 2), 8);
	assert_int_equal(wait_done(q, &d), 1);
	assert_int_equal(d.err, 0);
	bufs_check_free(&b, &d, 8);
	ibc_req_get_stats(q, &rs);
	assert_int_equal(rs.endpoints, 1);
	assert_int_equal(rs.reaped, 1);
	assert_true(rs.resets >= 1);	/* drained before reuse */
	ibc_req_free(q);

	/* silent: the request is lost on the way every time */
	q = req_new(st, 1, 30 * MS, &peer);
	atomic_store(&st->mode, RESP_SILENT);
	bufs_init(&b, 0, 1, 2);
	assert_int_equal(ibc_req_submit(q, peer, INO, GEN, b.pg, 2, b.dst, 1), 2);
	assert_int_equal(wait_done(q, &d), 1);
	assert_int_equal(d.err, -ETIMEDOUT);
	ibc_req_get_stats(q, &rs);
	assert_true(rs.retries >= 2);
	bufs_check_free(&b, NULL, 2);
	ibc_req_free(q);
	resp_stop(st);
}

static void test_refused(void **s_)
{
	struct ibc_req_opts o = { .timeout_ns = 5000 * MS };
	struct ibc_req *q = ibc_req_new(&o);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	struct xuri u = { .scheme = XURI_UDP, .host = "127.0.0.1" };
	struct ibc_req_stats rs;
	struct ibc_done d;
	struct bufs b;
	char err[256];
	int fd = socket(AF_INET, SOCK_DGRAM, 0), peer;
	uint64_t t0;

	/* a port that was just free: nothing listens there */
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	getsockname(fd, (struct sockaddr *)&a, &al);
	close(fd);
	u.port = ntohs(a.sin_port);
	peer = ibc_req_add_peer(q, &u, err, sizeof(err));
	assert_int_equal(peer, 0);
	bufs_init(&b, 0, 1, 4);
	t0 = xtime_ns();
	assert_int_equal(ibc_req_submit(q, peer, INO, GEN, b.pg, 4, b.dst, 1), 4);
	assert_int_equal(wait_done(q, &d), 1);
	assert_int_equal(d.err, -ECONNREFUSED);
	assert_true(xtime_ns() - t0 < 1000 * MS);	/* not the 5 s timeout */
	ibc_req_get_stats(q, &rs);
	assert_int_equal(rs.refused, 1);
	bufs_check_free(&b, NULL, 4);
	ibc_req_free(q);
}

static void test_blocks_stale(void **s_)
{
	struct responder *st = srv_start();
	struct ibc_done d;
	struct bufs b;
	int peer, n;
	struct ibc_req *q = req_new(st, 1, 2000 * MS, &peer);

	/* every other page: 100 one-page blocks in one request */
	bufs_init(&b, 3, 2, 150);
	n = ibc_req_submit(q, peer, INO, GEN, b.pg, 150, b.dst, 1);
	assert_int_equal(n, 121);	/* gfarm's GFCC_PBLK_MAX blocks */
	assert_int_equal(wait_done(q, &d), 1);
	assert_int_equal(d.err, 0);
	assert_int_equal(d.taken, 121);
	bufs_check_free(&b, &d, 121);
	for (int i = 121; i < 150; i++)
		free(b.dst[i]);
	/* another generation: ESTALE, no page */
	bufs_init(&b, 0, 1, 4);
	assert_int_equal(ibc_req_submit(q, peer, INO, GEN + 1, b.pg, 4, b.dst, 1), 4);
	assert_int_equal(wait_done(q, &d), 1);
	assert_int_equal(d.err, ESTALE);
	assert_int_equal(d.nok, 0);
	bufs_check_free(&b, NULL, 4);
	ibc_req_free(q);
	resp_stop(st);
}

/* A request the wire cannot carry (a page whose byte offset is no off_t)
 * is refused as such: the endpoint it got says nothing of memory. */
static void test_bad_request_error(void **s_)
{
	struct responder *st = srv_start();
	struct bufs b;
	int peer;
	struct ibc_req *q = req_new(st, 1, 2000 * MS, &peer);

	bufs_init(&b, (uint64_t)INT64_MAX / PS, 1, 1);
	assert_int_equal(ibc_req_submit(q, peer, INO, GEN, b.pg, 1, b.dst, 1), -EINVAL);
	assert_string_equal(ibc_req_error(q), "");
	assert_int_equal(ibc_req_inflight(q), 0);
	bufs_check_free(&b, NULL, 1);
	ibc_req_free(q);
	resp_stop(st);
}

/* Under loss, byte-exact: every page checked, every byte (the placed
 * receive puts datagrams where their segment goes, and moves the ones
 * that came in another's place). */
static void test_lossy(void **s_)
{
	struct responder *st = srv_start();
	struct ibc_req_opts o = { .depth = 4, .timeout_ns = 5000 * MS, .mtu = 1500 };
	struct ibc_req *q = ibc_req_new(&o);
	struct xuri u = { .scheme = XURI_UDP, .host = "127.0.0.1", .port = xdg_port(st->d) };
	struct ibc_req_stats rs;
	struct ibc_done d[4];
	static struct bufs b[4];
	char err[256];
	int peer = ibc_req_add_peer(q, &u, err, sizeof(err));

	assert_int_equal(peer, 0);
	atomic_store(&st->mode, RESP_LOSSY);
	for (int round = 0; round < 5; round++) {
		for (int r = 0; r < 4; r++) {
			bufs_init(&b[r], (uint64_t)(round * 4 + r) * 256, 1, 256);
			assert_int_equal(ibc_req_submit(q, peer, INO, GEN, b[r].pg, 256, b[r].dst,
							(uint64_t)r), 256);
		}
		for (int got = 0; got < 4;) {
			int n = ibc_req_poll(q, d, 4, 5000 * MS);

			for (int i = 0; i < n; i++) {
				struct bufs *x = &b[d[i].tag];

				assert_int_equal(d[i].err, 0);
				assert_int_equal(d[i].nok, 256);
				for (uint32_t p = 0; p < 256; p++)
					for (uint32_t off = 0; off < PS; off++)
						if (x->dst[p][off] != pat(x->pg[p], off))
							fail_msg("round %d page %llu byte %u", round,
								 (unsigned long long)x->pg[p], off);
				bufs_check_free(x, NULL, 256);
			}
			got += n;
		}
	}
	ibc_req_get_stats(q, &rs);
	assert_true(rs.segments_asked > 0);
	ibc_req_free(q);
	resp_stop(st);
}

int main(void)
{
	const struct CMUnitTest t[] = {
		cmocka_unit_test(test_reuse_depth),
		cmocka_unit_test(test_reap_and_strays),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_blocks_stale),
		cmocka_unit_test(test_bad_request_error),
		cmocka_unit_test(test_lossy),
	};

	return cmocka_run_group_tests(t, NULL, NULL);
}
