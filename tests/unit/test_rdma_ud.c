/* ud:// datagrams on a real UD QP (xdg.h, xdg_ud.c).  Runs where an active
 * RDMA device exists -- tests/vm/xprt-vm -- and skips with the reason
 * elsewhere.  A peer answers SIDR only while it polls, so resolving another
 * endpoint runs with a helper thread polling that endpoint. */
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

#include "core/uri.h"
#include "xprt/xdg.h"
#include "rdma_test.h"

struct poller {
	struct xdg *d;
	atomic_bool stop;
};

static void *poll_main(void *p)
{
	struct poller *pl = p;

	while (!atomic_load(&pl->stop)) {
		xdg_poll(pl->d, NULL, 0);
		xdg_wait(pl->d, 10000000);
	}
	return NULL;
}

/* a resolves b while a thread keeps b answering. */
static struct xdg_addr *resolve_polled(struct xdg *a, struct xdg *b)
{
	struct poller pl = { .d = b };
	struct xdg_addr *r;
	pthread_t t;
	char s[100], err[256];
	struct xuri u;

	snprintf(s, sizeof(s), "ud://%s:%u", rdma_test_ip(), xdg_port(b));
	assert_int_equal(xuri_parse(s, 0, &u, err, sizeof(err)), 0);
	assert_int_equal(pthread_create(&t, NULL, poll_main, &pl), 0);
	r = xdg_resolve(a, &u, err, sizeof(err));
	atomic_store(&pl.stop, true);
	pthread_join(t, NULL);
	if (!r)
		fail_msg("resolve: %s", err);
	return r;
}

static struct xdg_wc next_wc(struct xdg *d)
{
	struct xdg_wc wc;

	for (int i = 0; i < 1000; i++) {
		int n = xdg_poll(d, &wc, 1);

		assert_true(n >= 0);
		if (n == 1)
			return wc;
		assert_true(xdg_wait(d, 10000000) >= 0);
	}
	fail_msg("no completion within 10 s");
	return wc;
}

static void test_open(void **state)
{
	struct xdg *d;
	char err[256];
	struct xuri u;

	(void)state;
	RDMA_OR_SKIP();
	d = rdma_test_ud_open(NULL);
	print_message("mtu %u port %u\n", xdg_mtu(d), xdg_port(d));
	assert_true(xdg_mtu(d) >= 256 && xdg_mtu(d) <= 4096);
	assert_true(xdg_port(d) > 0);
	assert_int_equal(xdg_scheme(d), XURI_UD);
	uint32_t active = xdg_mtu(d);

	xdg_close(d);
	/* an MTU above the port's is refused in one line */
	rdma_test_uri(&u, XURI_UD, rdma_test_ip(), 0);
	assert_null(xdg_open(&u, &(struct xdg_opts){ .mtu = active * 2 }, err, sizeof(err)));
	assert_int_equal(errno, EMSGSIZE);
	assert_non_null(strstr(err, "exceeds the active MTU"));
	/* a smaller one is fine */
	d = xdg_open(&u, &(struct xdg_opts){ .mtu = 256 }, err, sizeof(err));
	assert_non_null(d);
	assert_int_equal(xdg_mtu(d), 256);
	xdg_close(d);
	/* wildcard bind picks the active device */
	rdma_test_uri(&u, XURI_UD, "0.0.0.0", 0);
	d = xdg_open(&u, NULL, err, sizeof(err));
	if (!d)
		fail_msg("wildcard: %s", err);
	xdg_close(d);
}

static void test_send_recv_reply(void **state)
{
	struct xdg *a, *b;
	struct xdg_addr *to_b, *again;
	struct xdg_wc wc;
	char msg[64];

	(void)state;
	RDMA_OR_SKIP();
	a = rdma_test_ud_open(NULL);
	b = rdma_test_ud_open(NULL);
	to_b = resolve_polled(a, b);
	again = resolve_polled(a, b);
	assert_ptr_equal(to_b, again);
	print_message("b is %s\n", xdg_addr_str(to_b));
	assert_non_null(strchr(xdg_addr_str(to_b), '/'));
	for (int i = 0; i < 10; i++) {
		snprintf(msg, sizeof(msg), "ping %d", i);
		assert_int_equal(xdg_send(a, to_b, msg, strlen(msg) + 1, (uint64_t)i,
					  i == 9 ? XDG_SIGNALED : 0), 0);
	}
	for (int i = 0; i < 10; i++) {
		wc = next_wc(b);
		assert_int_equal(wc.op, XDG_OP_RECV);
		assert_int_equal(wc.status, 0);
		snprintf(msg, sizeof(msg), "ping %d", i);	/* one QP pair: in order in practice */
		assert_int_equal(wc.len, strlen(msg) + 1);
		assert_string_equal(wc.data, msg);
		assert_non_null(wc.src);
	}
	/* reply to the source of the last one */
	assert_int_equal(xdg_send(b, wc.src, "pong", 5, 77, XDG_SIGNALED), 0);
	wc = next_wc(a);
	/* a sees its own signaled send (wr_id 9) and the pong, in either order */
	bool pong = false, sent9 = false;

	for (int k = 0; k < 2; k++) {
		if (k)
			wc = next_wc(a);
		if (wc.op == XDG_OP_SEND) {
			assert_int_equal(wc.wr_id, 9);
			assert_int_equal(wc.status, 0);
			sent9 = true;
		} else {
			assert_string_equal(wc.data, "pong");
			/* the source of the pong is b, the same object as resolved */
			assert_ptr_equal(wc.src, to_b);
			pong = true;
		}
	}
	assert_true(pong && sent9);
	wc = next_wc(b);
	assert_int_equal(wc.op, XDG_OP_SEND);
	assert_int_equal(wc.wr_id, 77);
	struct xdg_stats st;

	xdg_get_stats(b, &st);
	assert_int_equal(st.rx_pkts, 10);
	assert_int_equal(st.tx_pkts, 1);
	xdg_close(a);
	xdg_close(b);
}

static void test_mtu_limit_and_batch(void **state)
{
	static char big[8192];
	struct xdg *a, *b;
	struct xdg_addr *to_b;
	struct xdg_wc wc;
	struct xdg_msg m[40];
	uint32_t mtu;
	int n, got = 0;

	(void)state;
	RDMA_OR_SKIP();
	a = rdma_test_ud_open(&(struct xdg_opts){ .tx_depth = 32 });
	b = rdma_test_ud_open(NULL);
	to_b = resolve_polled(a, b);
	mtu = xdg_mtu(a);
	for (uint32_t i = 0; i < sizeof(big); i++)
		big[i] = (char)(i * 31);
	assert_int_equal(xdg_send(a, to_b, big, mtu + 1, 1, 0), -EMSGSIZE);
	assert_int_equal(xdg_send(a, to_b, big, mtu, 1, 0), 0);
	wc = next_wc(b);
	assert_int_equal(wc.len, mtu);
	assert_memory_equal(wc.data, big, mtu);
	/* a batch bigger than the send queue: fewer are queued, then the rest */
	for (int i = 0; i < 40; i++)
		m[i] = (struct xdg_msg){ to_b, big + i, 100 + (uint32_t)i, (uint64_t)i };
	n = xdg_send_batch(a, m, 40, 0);
	assert_true(n > 0 && n <= 40);
	int queued = n;

	while (got < 40) {
		wc = next_wc(b);
		assert_int_equal(wc.status, 0);
		int i = (int)wc.len - 100;

		assert_true(i >= 0 && i < 40);
		assert_memory_equal(wc.data, big + i, wc.len);
		got++;
		if (queued < 40) {
			xdg_poll(a, &wc, 0);
			struct xdg_wc sw[8];

			xdg_poll(a, sw, 8);
			n = xdg_send_batch(a, m + queued, 40 - queued, 0);
			if (n > 0)
				queued += n;
			else
				assert_int_equal(n, -ENOBUFS);
		}
	}
	assert_int_equal(queued, 40);
	xdg_close(a);
	xdg_close(b);
}

static void test_resolve_nobody(void **state)
{
	struct xdg *a, *b;
	struct xuri u;
	char s[100], err[256];
	uint16_t port;

	(void)state;
	RDMA_OR_SKIP();
	b = rdma_test_ud_open(NULL);
	port = xdg_port(b);
	xdg_close(b);
	a = rdma_test_ud_open(&(struct xdg_opts){ .timeout_ns = 2000000000ull });
	snprintf(s, sizeof(s), "ud://%s:%u", rdma_test_ip(), port);
	assert_int_equal(xuri_parse(s, 0, &u, err, sizeof(err)), 0);
	assert_null(xdg_resolve(a, &u, err, sizeof(err)));
	print_message("resolve of nobody: %s\n", err);
	assert_true(strncmp(err, s, strlen(s)) == 0);
	/* resolving ourselves works: we answer our own SIDR request */
	snprintf(s, sizeof(s), "ud://%s:%u", rdma_test_ip(), xdg_port(a));
	assert_int_equal(xuri_parse(s, 0, &u, err, sizeof(err)), 0);
	struct xdg_addr *self = xdg_resolve(a, &u, err, sizeof(err));

	if (!self)
		fail_msg("self: %s", err);
	assert_int_equal(xdg_send(a, self, "me", 3, 0, 0), 0);
	struct xdg_wc wc = next_wc(a);

	assert_int_equal(wc.op, XDG_OP_RECV);
	assert_string_equal(wc.data, "me");
	assert_ptr_equal(wc.src, self);
	xdg_close(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_open),
		cmocka_unit_test(test_send_recv_reply),
		cmocka_unit_test(test_mtu_limit_and_batch),
		cmocka_unit_test(test_resolve_nobody),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
