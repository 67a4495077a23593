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

/* xdg_addr_host(): a host's senders, whatever their ports, give the same
 * bytes; another address (127.0.0.2 is loopback too on Linux) others; a
 * v4 peer seen on a dual-stack socket is the same host as on a v4 one. */
static void test_addr_host(void **state)
{
	struct xdg *s = open_ep("127.0.0.1", NULL), *c[3];
	uint8_t k[3][XDG_HOST_MAX], r[XDG_HOST_MAX];
	size_t kl[3];
	struct xdg_wc wc;
	char x = 'x';

	(void)state;
	for (int i = 0; i < 3; i++) {
		c[i] = open_ep(i < 2 ? "127.0.0.1" : "127.0.0.2", NULL);
		assert_int_equal(xdg_send(c[i], resolve(c[i], "127.0.0.1", xdg_port(s)), &x, 1, 0,
					  0), 0);
		assert_int_equal(recv_n(s, &wc, 1), 1);
		kl[i] = xdg_addr_host(wc.src, k[i]);
		assert_true(kl[i] > 0 && kl[i] <= XDG_HOST_MAX);
	}
	assert_int_equal(kl[0], kl[1]);
	assert_memory_equal(k[0], k[1], kl[0]);
	assert_true(kl[2] != kl[0] || memcmp(k[0], k[2], kl[0]));
	/* resolved, another port: the same host */
	assert_int_equal(xdg_addr_host(resolve(s, "127.0.0.1", 9), r), kl[0]);
	assert_memory_equal(r, k[0], kl[0]);
	for (int i = 0; i < 3; i++)
		xdg_close(c[i]);
	xdg_close(s);

	int fd = socket(AF_INET6, SOCK_DGRAM, 0);
	struct sockaddr_in6 sa = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT };

	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (fd >= 0)
			close(fd);
		skip();	/* no IPv6 here */
	}
	close(fd);
	s = open_ep("::", NULL);
	assert_int_equal(xdg_addr_host(resolve(s, "127.0.0.1", 7), r), kl[0]);
	assert_memory_equal(r, k[0], kl[0]);
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

/* Runs of datagrams: a sender's batch of one size to one peer goes as one
 * UDP_SEGMENT message, and a receiver with gro gets it coalesced; each
 * datagram still comes out as its own completion, in order, byte-exact,
 * also when a poll has room for fewer than a run holds.  Random batches
 * (sizes, a short last one, empty datagrams, two peers interleaved, a
 * header in front), to a receiver with gro and one without; the seed is
 * printed. */
static void test_gso_gro(void **state)
{
	struct xdg_opts go = { .gro = true, .mtu = 9000 }, po = { .mtu = 9000 };
	struct xdg *c = open_ep("127.0.0.1", &po), *r[2];
	struct xdg_addr *to[2];
	static uint8_t buf[200][4096];
	uint32_t len[200];
	unsigned seed = (unsigned)xtime_ns();
	struct xdg_stats st;
	uint64_t runs_before;

	(void)state;
	printf("# test_gso_gro seed %u\n", seed);
	srand(seed);
	r[0] = open_ep("127.0.0.1", &go);
	r[1] = open_ep("127.0.0.1", &po);
	assert_true(xdg_gro(r[0]));
	assert_false(xdg_gro(r[1]));
	for (int i = 0; i < 2; i++)
		to[i] = resolve(c, "127.0.0.1", xdg_port(r[i]));
	{	/* placement cannot take a run */
		struct xdg_sge g = { buf[0], 16, NULL };
		struct xdg_rwr w = { .sg = &g, .nsge = 1 };
		struct xdg_wc wc;

		assert_int_equal(xdg_recv_sg(r[0], &w, 1, &wc), -EOPNOTSUPP);
	}
	xdg_get_stats(r[0], &st);
	runs_before = st.rx_runs;
	for (int trial = 0; trial < 40; trial++) {
		struct xdg_dgram dg[200];
		int n = 1 + rand() % 200, sz = rand() % 4 ? 1 + rand() % 2000 : rand() % 4096;
		int sent = 0, got[2] = { 0, 0 }, want[2] = { 0, 0 }, seq[2][200], nseq[2] = { 0, 0 };
		uint8_t hdr[200][8];

		for (int i = 0; i < n; i++) {
			int p = rand() % 8 ? 0 : 1;	/* mostly one peer: runs */
			uint32_t l = rand() % 16 ? (uint32_t)sz : (uint32_t)(rand() % 3 ? sz / 2 : 0);
			bool h = l >= 8 && rand() % 2;

			for (uint32_t j = 0; j < l; j++)
				buf[i][j] = (uint8_t)(i * 31 + j * 7 + trial);
			if (l >= 2) {
				buf[i][0] = (uint8_t)i;
				buf[i][1] = (uint8_t)trial;
			}
			len[i] = l;
			memcpy(hdr[i], buf[i], h ? 8 : 0);
			dg[i] = (struct xdg_dgram){ .to = to[p], .hdr = h ? hdr[i] : NULL,
						    .hlen = h ? 8 : 0, .buf = buf[i] + (h ? 8 : 0),
						    .len = l - (h ? 8 : 0) };
			seq[p][nseq[p]++] = i;
			want[p]++;
		}
		while (sent < n) {
			int k = xdg_send_dgrams(c, dg + sent, n - sent, 0);

			if (k == -EAGAIN || k == -ENOBUFS) {
				struct xdg_wc w[8];

				xdg_poll(c, w, 8);
				continue;
			}
			assert_true(k > 0);
			sent += k;
		}
		for (int p = 0; p < 2; p++) {
			uint64_t end = xtime_ns() + 5 * XTIME_NS_PER_S;

			while (got[p] < want[p] && xtime_ns() < end) {
				struct xdg_wc wc[7];
				int room = 1 + rand() % 7, k = xdg_poll(r[p], wc, room);

				assert_true(k >= 0 && k <= room);
				for (int i = 0; i < k; i++) {
					int d = seq[p][got[p]];

					assert_int_equal(wc[i].op, XDG_OP_RECV);
					assert_int_equal(wc[i].status, 0);
					if (wc[i].len != len[d])
						fail_msg("seed %u trial %d peer %d: datagram %d is %u bytes, not %u",
							 seed, trial, p, d, wc[i].len, len[d]);
					if (len[d] && memcmp(wc[i].data, buf[d], len[d]))
						fail_msg("seed %u trial %d peer %d: datagram %d differs", seed,
							 trial, p, d);
					got[p]++;
				}
				if (!k)
					xdg_wait(r[p], 100 * XTIME_NS_PER_MS);
			}
			if (got[p] != want[p])
				fail_msg("seed %u trial %d peer %d: %d of %d datagrams", seed, trial, p,
					 got[p], want[p]);
		}
	}
	/* the runs were real: the sender segmented, the receiver got them whole */
	xdg_get_stats(r[0], &st);
	assert_true(st.rx_runs > runs_before);
	assert_int_equal(st.rx_truncated, 0);
	{	/* a reset drops what a run left pending, and xdg_wait sees it */
		struct xdg_dgram dg[10];
		struct xdg_wc wc[8];
		uint64_t end = xtime_ns() + 5 * XTIME_NS_PER_S;

		for (int i = 0; i < 10; i++)
			dg[i] = (struct xdg_dgram){ .to = to[0], .buf = buf[i], .len = 1000 };
		assert_int_equal(xdg_send_dgrams(c, dg, 10, 0), 10);
		while (xdg_poll(r[0], wc, 1) == 0 && xtime_ns() < end)
			xdg_wait(r[0], 100 * XTIME_NS_PER_MS);
		/* eight more are pending in a run, or queued: either wakes a waiter */
		assert_int_equal(xdg_poll(r[0], wc, 1), 1);
		assert_int_equal(xdg_wait(r[0], 0), 1);
		assert_int_equal(xdg_reset(r[0], 0), 0);
		assert_int_equal(xdg_poll(r[0], wc, 8), 0);
	}
	xdg_get_stats(r[1], &st);
	assert_int_equal(st.rx_runs, 0);
	xdg_close(c);
	xdg_close(r[0]);
	xdg_close(r[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_open_resolve),
		cmocka_unit_test(test_send_recv_reply),
		cmocka_unit_test(test_batch_and_truncation),
		cmocka_unit_test(test_tx_queue_full),
		cmocka_unit_test(test_many_senders_cache),
		cmocka_unit_test(test_addr_host),
		cmocka_unit_test(test_ipv6),
		cmocka_unit_test(test_gso_gro),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
