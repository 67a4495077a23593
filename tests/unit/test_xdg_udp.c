/* The udp:// datagram backend over loopback: resolve and its cache, send and
 * receive, batches, truncation counting, replies to wc.src, IPv6. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/xtime.h"
#include "xprt/xdg.h"

static struct xuri uri(const char *host, uint16_t port)
{
	struct xuri u = { .scheme = XURI_UDP, .port = port };

	snprintf(u.host, sizeof(u.host), "%s", host);
	return u;
}

static struct xdg *open_ep(const char *host, const struct xdg_opts *o)
{
	struct xuri u = uri(host, 0);
	char err[256];
	struct xdg *d = xdg_open(&u, o, err, sizeof(err));

	if (!d)
		fail_msg("%s", err);
	return d;
}

static struct xdg_addr *resolve(struct xdg *d, const char *host, uint16_t port)
{
	struct xuri u = uri(host, port);
	char err[256];
	struct xdg_addr *a = xdg_resolve(d, &u, err, sizeof(err));

	if (!a)
		fail_msg("%s", err);
	return a;
}

/* Up to n receive completions (sends are skipped), waiting at most 5 s. */
static int recv_n(struct xdg *d, struct xdg_wc *out, int n)
{
	uint64_t end = xtime_ns() + 5 * XTIME_NS_PER_S;
	int k = 0;

	while (k < n && xtime_ns() < end) {
		struct xdg_wc wc[64];
		int got = xdg_poll(d, wc, n - k < 64 ? n - k : 64);

		assert_true(got >= 0);
		for (int i = 0; i < got; i++)
			if (wc[i].op == XDG_OP_RECV)
				out[k++] = wc[i];
		if (k < n && !got)
			xdg_wait(d, 100 * XTIME_NS_PER_MS);
		/* data is only valid until the next poll: callers here ask for
		 * all they need in one go or copy first */
		if (k && k < n)
			break;
	}
	return k;
}

static void test_open_resolve(void **state)
{
	struct xdg *d = open_ep("127.0.0.1", NULL);
	struct xdg_addr *a, *b;
	char want[32];
	struct xuri bad = uri("no-such-host.invalid", 1);
	char err[256];

	(void)state;
	assert_int_equal(xdg_mtu(d), 4096);
	assert_int_equal(xdg_scheme(d), XURI_UDP);
	assert_true(xdg_port(d) != 0);
	a = resolve(d, "127.0.0.1", 5000);
	b = resolve(d, "localhost", 5000);
	assert_ptr_equal(a, b);	/* same peer, same address */
	assert_ptr_not_equal(a, resolve(d, "127.0.0.1", 5001));
	snprintf(want, sizeof(want), "127.0.0.1:5000");
	assert_string_equal(xdg_addr_str(a), want);
	assert_null(xdg_resolve(d, &bad, err, sizeof(err)));
	assert_true(strstr(err, "cannot resolve") != NULL);
	xdg_close(d);

	struct xdg_opts big = { .mtu = 70000 };
	struct xuri u = uri("127.0.0.1", 0);
	assert_null(xdg_open(&u, &big, err, sizeof(err)));
	assert_int_equal(errno, EINVAL);
}

static void test_send_recv_reply(void **state)
{
	struct xdg *s = open_ep("127.0.0.1", NULL), *c = open_ep("127.0.0.1", NULL);
	struct xdg_addr *to = resolve(c, "127.0.0.1", xdg_port(s));
	struct xdg_wc wc, w[4];
	char hello[] = "hello", back[] = "back";
	int n;

	(void)state;
	assert_int_equal(xdg_send(c, to, hello, 5, 42, XDG_SIGNALED), 0);
	assert_int_equal(recv_n(s, &wc, 1), 1);
	assert_int_equal(wc.status, 0);
	assert_int_equal(wc.len, 5);
	assert_memory_equal(wc.data, "hello", 5);
	assert_non_null(wc.src);
	/* reply to the sender as it was seen */
	assert_int_equal(xdg_send(s, wc.src, back, 4, 0, 0), 0);
	n = xdg_poll(c, w, 4);	/* the signaled send's completion comes first */
	assert_true(n >= 1);
	assert_int_equal(w[0].op, XDG_OP_SEND);
	assert_int_equal(w[0].wr_id, 42);
	if (n == 1)
		assert_int_equal(recv_n(c, &w[1], 1), 1);
	assert_int_equal(w[1].op, XDG_OP_RECV);
	assert_memory_equal(w[1].data, "back", 4);
	/* the sender seen by c is the address it resolved */
	assert_ptr_equal(w[1].src, to);

	struct xdg_stats st;
	xdg_get_stats(c, &st);
	assert_int_equal(st.tx_pkts, 1);
	assert_int_equal(st.rx_pkts, 1);
	assert_int_equal(st.tx_bytes, 5);
	xdg_close(s);
	xdg_close(c);
}

static void test_batch_and_truncation(void **state)
{
	struct xdg_opts o = { .mtu = 1000, .rx_depth = 64 };
	struct xdg *s = open_ep("127.0.0.1", &o), *c = open_ep("127.0.0.1", &o);
	struct xdg_addr *to = resolve(c, "127.0.0.1", xdg_port(s));
	static uint8_t buf[32][1000];
	struct xdg_msg m[32];
	struct xdg_wc wc[32];
	struct xdg_stats st;
	int sent, got = 0;

	(void)state;
	for (int i = 0; i < 32; i++) {
		memset(buf[i], i, sizeof(buf[i]));
		m[i] = (struct xdg_msg){ to, buf[i], (uint32_t)(100 + i * 20), (uint64_t)i };
	}
	sent = xdg_send_batch(c, m, 32, 0);
	assert_int_equal(sent, 32);
	while (got < 32) {
		int n = recv_n(s, wc, 32 - got);
		assert_true(n > 0);
		for (int i = 0; i < n; i++, got++) {
			assert_int_equal(wc[i].len, 100 + got * 20);
			assert_int_equal(((const uint8_t *)wc[i].data)[wc[i].len - 1], got);
		}
	}

	/* bigger than the receiver's mtu: dropped and counted, never cut */
	struct xdg_opts big = { .mtu = 2000 };
	struct xdg *c2 = open_ep("127.0.0.1", &big);
	struct xdg_addr *to2 = resolve(c2, "127.0.0.1", xdg_port(s));
	static uint8_t large[2000];
	assert_int_equal(xdg_send(c2, to2, large, 2000, 0, 0), 0);
	assert_int_equal(xdg_send(c2, to2, large, 10, 0, 0), 0);
	assert_int_equal(recv_n(s, wc, 1), 1);
	assert_int_equal(wc[0].len, 10);
	xdg_get_stats(s, &st);
	assert_int_equal(st.rx_truncated, 1);
	assert_int_equal(st.rx_pkts, 33);
	/* too big for our own mtu */
	assert_int_equal(xdg_send(c, to, large, 1001, 0, 0), -EMSGSIZE);
	xdg_close(c2);
	xdg_close(s);
	xdg_close(c);
}

static void test_tx_queue_full(void **state)
{
	struct xdg_opts o = { .tx_depth = 4 };
	struct xdg *s = open_ep("127.0.0.1", NULL), *c = open_ep("127.0.0.1", &o);
	struct xdg_addr *to = resolve(c, "127.0.0.1", xdg_port(s));
	struct xdg_msg m[8];
	struct xdg_wc wc[8];
	char x = 'x';

	(void)state;
	for (int i = 0; i < 8; i++)
		m[i] = (struct xdg_msg){ to, &x, 1, (uint64_t)i };
	/* signaled completions are bounded by tx_depth until polled */
	assert_int_equal(xdg_send_batch(c, m, 8, XDG_SIGNALED), 4);
	assert_int_equal(xdg_send_batch(c, m, 8, XDG_SIGNALED), -ENOBUFS);
	assert_int_equal(xdg_wait(c, 0), 1);
	int n = xdg_poll(c, wc, 8);
	assert_true(n >= 4);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(wc[i].op, XDG_OP_SEND);
		assert_int_equal(wc[i].wr_id, (uint64_t)i);
	}
	assert_int_equal(xdg_send_batch(c, m + 4, 4, XDG_SIGNALED), 4);
	xdg_close(s);
	xdg_close(c);
}

static void test_many_senders_cache(void **state)
{
	struct xdg *s = open_ep("127.0.0.1", NULL);
	struct xdg_addr *first = NULL;
	struct xdg_wc wc;
	char x = 'x';

	(void)state;
	/* a few senders from distinct ports: distinct, stable addresses */
	struct xdg *c[3];
	struct xdg_addr *seen[3];
	for (int i = 0; i < 3; i++) {
		c[i] = open_ep("127.0.0.1", NULL);
		assert_int_equal(xdg_send(c[i], resolve(c[i], "127.0.0.1", xdg_port(s)), &x, 1, 0,
					  0), 0);
		assert_int_equal(recv_n(s, &wc, 1), 1);
		seen[i] = wc.src;
	}
	assert_ptr_not_equal(seen[0], seen[1]);
	assert_ptr_not_equal(seen[1], seen[2]);
	assert_int_equal(xdg_send(c[0], resolve(c[0], "127.0.0.1", xdg_port(s)), &x, 1, 0, 0), 0);
	assert_int_equal(recv_n(s, &wc, 1), 1);
	assert_ptr_equal(wc.src, seen[0]);
	/* resolving a known sender returns its cached entry */
	first = resolve(s, "127.0.0.1", xdg_port(c[1]));
	assert_ptr_equal(first, seen[1]);
	for (int i = 0; i < 3; i++)
		xdg_close(c[i]);
	xdg_close(s);
}

static void test_ipv6(void **state)
{
	int fd = socket(AF_INET6, SOCK_DGRAM, 0);
	struct sockaddr_in6 sa = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	struct xdg_wc wc;
	char six[] = "six";

	(void)state;
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (fd >= 0)
			close(fd);
		skip();	/* ::1 is not configured here */
	}
	close(fd);
	struct xdg *s = open_ep("::1", NULL), *c = open_ep("::1", NULL);
	struct xdg_addr *to = resolve(c, "::1", xdg_port(s));
	char want[64];
	snprintf(want, sizeof(want), "[::1]:%u", xdg_port(s));
	assert_string_equal(xdg_addr_str(to), want);
	assert_int_equal(xdg_send(c, to, six, 3, 0, 0), 0);
	assert_int_equal(recv_n(s, &wc, 1), 1);
	assert_memory_equal(wc.data, "six", 3);
	assert_true(strncmp(xdg_addr_str(wc.src), "[::1]:", 6) == 0);
	assert_int_equal(xdg_send(s, wc.src, six, 2, 0, 0), 0);
	assert_int_equal(recv_n(c, &wc, 1), 1);
	assert_int_equal(wc.len, 2);
	xdg_close(s);
	xdg_close(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_open_resolve),
		cmocka_unit_test(test_send_recv_reply),
		cmocka_unit_test(test_batch_and_truncation),
		cmocka_unit_test(test_tx_queue_full),
		cmocka_unit_test(test_many_senders_cache),
		cmocka_unit_test(test_ipv6),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
