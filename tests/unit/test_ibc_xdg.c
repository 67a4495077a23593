/* The datagram-endpoint calls ibcache's requester pool relies on, over
 * udp:// on loopback (xdg.h "per-request endpoints"): a header and a
 * payload in one datagram, connect() with a closed port reported, the
 * path MTU, a reset that drains, scatter receives (and what does not fit
 * them), addresses imported from a resolver endpoint.  ud:// has the same
 * in test_rdma_ibc.c. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/xtime.h"
#include "xprt/xdg.h"

static struct xdg *ep(uint32_t mtu)
{
	struct xuri u = { .scheme = XURI_UDP, .host = "127.0.0.1" };
	struct xdg_opts o = { .mtu = mtu, .rx_depth = 16 };
	char err[256];
	struct xdg *d = xdg_open(&u, &o, err, sizeof(err));

	if (!d)
		fail_msg("open: %s", err);
	return d;
}

static struct xdg_addr *addr_of(struct xdg *from, struct xdg *to)
{
	struct xuri u = { .scheme = XURI_UDP, .host = "127.0.0.1", .port = xdg_port(to) };
	char err[256];
	struct xdg_addr *a = xdg_resolve(from, &u, err, sizeof(err));

	assert_non_null(a);
	return a;
}

static int recv_wait(struct xdg *d, struct xdg_wc *wc, int n)
{
	for (int i = 0; i < 200; i++) {
		int k = xdg_poll(d, wc, n);

		if (k)
			return k;
		xdg_wait(d, 10000000ull);
	}
	return 0;
}

static void test_hdr_send_and_mtu(void **s)
{
	struct xdg *a = ep(2000), *b = ep(2000);
	struct xdg_addr *to = addr_of(a, b);
	uint8_t hdr[16], pay[1984];
	struct xdg_dgram g = { .to = to, .hdr = hdr, .hlen = 16, .buf = pay, .len = 1984 };
	struct xdg_wc wc;

	memset(hdr, 0xaa, sizeof(hdr));
	memset(pay, 0x55, sizeof(pay));
	assert_int_equal(xdg_send_dgrams(a, &g, 1, 0), 1);
	assert_int_equal(recv_wait(b, &wc, 1), 1);
	assert_int_equal(wc.len, 2000);
	assert_int_equal(((const uint8_t *)wc.data)[15], 0xaa);
	assert_int_equal(((const uint8_t *)wc.data)[16], 0x55);
	g.len = 1985;	/* header + payload over the MTU */
	assert_int_equal(xdg_send_dgrams(a, &g, 1, 0), -EMSGSIZE);
	g.len = 10;
	g.qkey = 0x80000001u;	/* IB's "the QP's own" bit: refused */
	assert_int_equal(xdg_send_dgrams(a, &g, 1, 0), -EINVAL);
	/* loopback's MTU is 65536: the endpoint's own MTU is the cap */
	assert_int_equal(xdg_path_mtu(a, to), 2000);
	xdg_close(a);
	xdg_close(b);
}

static void test_connect_refused(void **s)
{
	struct xdg *a = ep(1500), *b = ep(1500), *c = ep(1500);
	struct xdg_addr *to = addr_of(a, b), *other = addr_of(c, a);
	struct xdg_wc wc[4];
	int k;

	assert_int_equal(xdg_connect(a, to), 0);
	/* connected: what c sends to a is not received */
	assert_int_equal(xdg_send(c, other, "x", 1, 0, 0), 0);
	assert_int_equal(xdg_send(b, addr_of(b, a), "y", 1, 0, 0), 0);
	assert_int_equal(recv_wait(a, wc, 4), 1);
	assert_int_equal(((const char *)wc[0].data)[0], 'y');
	/* b goes away: a's next datagram to it comes back refused */
	xdg_close(b);
	assert_int_equal(xdg_send(a, to, "z", 1, 0, 0), 0);
	k = recv_wait(a, wc, 4);
	assert_int_equal(k, 1);
	assert_int_equal(wc[0].status, -ECONNREFUSED);
	assert_int_equal(xdg_connect(a, NULL), 0);
	xdg_close(a);
	xdg_close(c);
}

static void test_reset_drains(void **s)
{
	struct xdg *a = ep(1500), *b = ep(1500);
	struct xdg_addr *to = addr_of(a, b);
	struct xdg_wc wc[4];

	for (int i = 0; i < 10; i++)
		assert_int_equal(xdg_send(a, to, "old", 3, 0, 0), 0);
	usleep(20000);
	assert_int_equal(xdg_reset(b, 0), 0);
	assert_int_equal(xdg_poll(b, wc, 4), 0);
	assert_int_equal(xdg_send(a, to, "new", 3, 0, 0), 0);
	assert_int_equal(recv_wait(b, wc, 4), 1);
	assert_int_equal(memcmp(wc[0].data, "new", 3), 0);
	/* nothing to set on udp: keys are checked in software */
	assert_int_equal(xdg_set_qkey(b, 5), 0);
	assert_int_equal(xdg_set_qkey(b, 0), -EINVAL);
	xdg_close(a);
	xdg_close(b);
}

static void test_recv_sg(void **s)
{
	struct xdg *a = ep(1500), *b = ep(1500);
	struct xdg_addr *to = addr_of(a, b);
	uint8_t m[1000], h[8], p1[300], p2[300];
	struct xdg_sge g[2][3] = { { { h, 8, NULL }, { p1, 300, NULL }, { p2, 300, NULL } },
				   { { h, 8, NULL }, { p1, 300, NULL }, { p2, 300, NULL } } };
	struct xdg_rwr w[2] = { { g[0], 3, 1 }, { g[1], 3, 2 } };
	struct xdg_wc wc[2];
	int k = 0;

	for (int i = 0; i < 1000; i++)
		m[i] = (uint8_t)i;
	assert_int_equal(xdg_send(a, to, m, 400, 0, 0), 0);
	for (int i = 0; i < 200 && k == 0; i++) {
		k = xdg_recv_sg(b, w, 1, wc);
		if (!k)
			usleep(1000);
	}
	assert_int_equal(k, 1);
	assert_int_equal(wc[0].status, 0);
	assert_int_equal(wc[0].len, 400);
	assert_true(wc[0].wr_id == 1);
	assert_int_equal(h[7], 7);
	assert_int_equal(p1[0], 8);
	assert_int_equal(p2[0], (uint8_t)308);
	/* longer than the list: cut short, and said so */
	assert_int_equal(xdg_send(a, to, m, 1000, 0, 0), 0);
	for (k = 0; k == 0;)
		if (!(k = xdg_recv_sg(b, w + 1, 1, wc)))
			usleep(1000);
	assert_int_equal(wc[0].status, -EMSGSIZE);
	/* nothing waiting: 0, at once */
	assert_int_equal(xdg_recv_sg(b, w, 2, wc), 0);
	g[0][0].len = 8;
	w[0].nsge = 65;
	assert_int_equal(xdg_recv_sg(b, w, 1, wc), -EINVAL);
	xdg_close(a);
	xdg_close(b);
}

static void test_import(void **s)
{
	struct xdg *res = ep(1500), *a = ep(1500), *b = ep(1500);
	struct xdg_addr *r = addr_of(res, b), *i;
	struct xdg_wc wc;
	char err[256];

	/* resolved once, used from another endpoint */
	i = xdg_addr_import(a, r, err, sizeof(err));
	assert_non_null(i);
	assert_string_equal(xdg_addr_str(i), xdg_addr_str(r));
	assert_int_equal(xdg_send(a, i, "i", 1, 0, 0), 0);
	assert_int_equal(recv_wait(b, &wc, 1), 1);
	assert_null(xdg_addr_import(a, NULL, err, sizeof(err)));
	/* udp has no registered memory nor posted receives */
	assert_null(xdg_mem_reg(a, err, 8, err, sizeof(err)));
	assert_int_equal(xdg_post_recv(a, NULL, 0), -EOPNOTSUPP);
	xdg_close(res);
	xdg_close(a);
	xdg_close(b);
}

static void test_user_rx_refused(void **s)
{
	struct xuri u = { .scheme = XURI_UDP, .host = "127.0.0.1" };
	struct xdg_opts o = { .user_rx = true };
	char err[256];

	assert_null(xdg_open(&u, &o, err, sizeof(err)));
	assert_non_null(strstr(err, "ud://"));
}

int main(void)
{
	const struct CMUnitTest t[] = {
		cmocka_unit_test(test_hdr_send_and_mtu),
		cmocka_unit_test(test_connect_refused),
		cmocka_unit_test(test_reset_drains),
		cmocka_unit_test(test_recv_sg),
		cmocka_unit_test(test_import),
		cmocka_unit_test(test_user_rx_refused),
	};

	return cmocka_run_group_tests(t, NULL, NULL);
}
