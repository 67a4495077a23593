/* Device discovery and auto-selection (xdev.h).  Without RDMA (the usual
 * host) it checks the plain "no RDMA device" behaviour, with RDMA (inside
 * tests/vm/xprt-vm) the positive path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include <endian.h>
#include <errno.h>
#include <arpa/inet.h>

#include "core/uri.h"
#include "core/xtime.h"
#include "xprt/rdma_util.h"
#include "xprt/xdev.h"
#include "xprt/xdg.h"
#include "xprt/xrc.h"
#include "rdma_test.h"

static bool have;
static char why[256];

static int setup(void **state)
{
	(void)state;
	have = xdev_rdma_available(why, sizeof(why));
	print_message("RDMA: %s\n", have ? "available" : why);
	return 0;
}

static void uri(const char *s, struct xuri *u)
{
	char err[200];

	assert_int_equal(xuri_parse(s, 0, u, err, sizeof(err)), 0);
}

static void one_line(const char *s)
{
	assert_non_null(s);
	assert_true(s[0] != '\0');
	assert_null(strchr(s, '\n'));
}

static void test_available_why(void **state)
{
	char w[256] = "x";

	(void)state;
	if (have) {
		assert_true(xdev_rdma_available(NULL, 0));
		return;
	}
	assert_false(xdev_rdma_available(w, sizeof(w)));
	one_line(w);
	/* plain, never a resolver error */
	assert_true(strncmp(w, "no RDMA device found", 20) == 0 || strstr(w, "has no active port"));
	assert_null(strstr(w, "Name or service"));
	assert_false(xdev_rdma_available(NULL, 0));
}

static void test_list(void **state)
{
	struct xnode *l = NULL;
	char w[256] = "";

	(void)state;
	assert_int_equal(xdev_list(&l, w, sizeof(w)), 0);
	assert_non_null(l);
	assert_int_equal(xnode_type(l), XN_LIST);
	if (!have) {
		one_line(w);
		xnode_free(l);
		return;
	}
	assert_true(xnode_len(l) >= 1);
	bool found_v4 = false;

	for (size_t i = 0; i < xnode_len(l); i++) {
		const struct xnode *m = xnode_at(l, i, NULL);

		assert_non_null(xnode_str(xnode_get(m, "device")));
		assert_true(xnode_u64(xnode_get(m, "port")) >= 1);
		assert_non_null(xnode_str(xnode_get(m, "state")));
		assert_non_null(xnode_str(xnode_get(m, "link_layer")));
		assert_non_null(xnode_str(xnode_get(m, "node_guid")));
		const struct xnode *g = xnode_get(m, "gids");

		assert_int_equal(xnode_type(g), XN_LIST);
		for (size_t j = 0; j < xnode_len(g); j++) {
			const struct xnode *e = xnode_at(g, j, NULL);
			const char *t = xnode_str(xnode_get(e, "type"));

			assert_non_null(xnode_str(xnode_get(e, "gid")));
			assert_true(!strcmp(t, "IB") || !strcmp(t, "RoCE v1") || !strcmp(t, "RoCE v2"));
			char want[64];

			snprintf(want, sizeof(want), "::ffff:%s", rdma_test_ip());
			if (!strcmp(xnode_str(xnode_get(e, "gid")), want)) {
				found_v4 = true;
				assert_string_equal(t, "RoCE v2");
				assert_non_null(xnode_str(xnode_get(e, "netdev")));
				assert_string_equal(xnode_str(xnode_get(m, "state")), "active");
				assert_string_equal(xnode_str(xnode_get(m, "link_layer")), "Ethernet");
				assert_true(xnode_u64(xnode_get(m, "active_mtu")) >= 256);
			}
		}
	}
	assert_true(found_v4);
	xnode_free(l);
}

static void test_auto(void **state)
{
	struct xuri u;
	char w[256];

	(void)state;
	uri("somehost:7000", &u);
	assert_int_equal(xaddr_resolve_auto(&u, false, w, sizeof(w)), 0);
	one_line(w);
	assert_int_equal(u.scheme, have ? XURI_RDMA : XURI_TCP);
	assert_true(strncmp(w, have ? "auto: rdma (device " : "auto: tcp (", 11) == 0);
	uri("somehost:7000", &u);
	assert_int_equal(xaddr_resolve_auto(&u, true, NULL, 0), 0);
	assert_int_equal(u.scheme, have ? XURI_UD : XURI_UDP);
	/* explicit schemes stay */
	uri("tcp://h:1", &u);
	assert_int_equal(xaddr_resolve_auto(&u, true, w, sizeof(w)), 0);
	assert_int_equal(u.scheme, XURI_TCP);
}

static void test_require(void **state)
{
	struct xuri u;
	char err[300] = "";

	(void)state;
	uri("tcp://h:1", &u);
	assert_int_equal(xdev_require(&u, err, sizeof(err)), 0);
	uri("rdma://10.0.0.9:7000", &u);
	if (have) {
		assert_int_equal(xdev_require(&u, err, sizeof(err)), 0);
		return;
	}
	assert_int_equal(xdev_require(&u, err, sizeof(err)), -ENODEV);
	one_line(err);
	assert_non_null(strstr(err, "rdma://10.0.0.9:7000: "));
	assert_non_null(strstr(err, "; use tcp://10.0.0.9:7000 instead"));
	uri("ud://h:9", &u);
	assert_int_equal(xdev_require(&u, err, sizeof(err)), -ENODEV);
	assert_non_null(strstr(err, "use udp://h:9 instead"));
}

/* The backends say the same one line before touching anything. */
static void test_backends_without_rdma(void **state)
{
	struct xuri u;
	char err[300] = "";
	uint8_t rep[XRC_PRIV_MAX];
	size_t replen = 99;

	(void)state;
	if (have) {
		/* positive path (test_rdma_rc / test_rdma_ud go further) */
		struct xrc_listener *l;
		struct xdg *d;

		rdma_test_uri(&u, XURI_RDMA, rdma_test_ip(), 0);
		l = xrc_listen(&u, NULL, err, sizeof(err));
		if (!l)
			fail_msg("%s", err);
		assert_true(xrc_listener_port(l) != 0);
		xrc_listener_close(l);
		rdma_test_uri(&u, XURI_UD, rdma_test_ip(), 0);
		d = xdg_open(&u, NULL, err, sizeof(err));
		if (!d)
			fail_msg("%s", err);
		assert_true(xdg_port(d) != 0);
		assert_true(xdg_mtu(d) >= 256);
		xdg_close(d);
		return;
	}
	rdma_test_uri(&u, XURI_RDMA, "127.0.0.1", 0);
	errno = 0;
	assert_null(xrc_listen(&u, NULL, err, sizeof(err)));
	assert_int_equal(errno, ENODEV);
	one_line(err);
	assert_non_null(strstr(err, "no RDMA device found"));
	uri("rdma://127.0.0.1:7", &u);
	errno = 0;
	assert_null(xrc_connect(&u, NULL, "x", 1, rep, &replen, err, sizeof(err)));
	assert_int_equal(errno, ENODEV);
	one_line(err);
	assert_true(strncmp(err, "rdma://127.0.0.1:7: no RDMA device found", 40) == 0);
	rdma_test_uri(&u, XURI_UD, "0.0.0.0", 0);
	errno = 0;
	assert_null(xdg_open(&u, NULL, err, sizeof(err)));
	assert_int_equal(errno, ENODEV);
	one_line(err);
	assert_non_null(strstr(err, "no RDMA device found"));
}

/* gid: addresses become AF_IB ones as the kernel's rtrs makes them; over
 * a RoCE-only device (rxe) an IB address cannot be reached: one line, at
 * once. */
static void test_gid(void **state)
{
	struct sockaddr_storage ss;
	const struct sockaddr_ib *sib = (const struct sockaddr_ib *)&ss;
	static const uint8_t want[16] = { 0xfe, 0x80, 0, 0, 0, 0, 0, 0,
					  0, 0x02, 0xc9, 0x03, 0, 0x0a, 0, 0x01 };
	char buf[128], err[300] = "";
	struct xuri u;

	(void)state;
	assert_int_equal(xrdma_gid_sockaddr("fe80::2:c903:a:1", 1234, &ss), 0);
	assert_int_equal(sib->sib_family, AF_IB);
	assert_memory_equal(&sib->sib_addr, want, 16);
	assert_int_equal(be64toh(sib->sib_sid), 0x13F0000ull | 1234);	/* RDMA_IB_PS_IB */
	assert_int_equal(sib->sib_sid_mask, ~0ull);
	assert_int_equal(ntohs(sib->sib_pkey), 0xffff);
	xrdma_addr_str((const struct sockaddr *)&ss, buf, sizeof(buf));
	assert_string_equal(buf, "[gid:fe80::2:c903:a:1]:1234");
	assert_int_equal(xrdma_gid_sockaddr("fe80::1%ib0", 1, &ss), -EINVAL);
	assert_int_equal(xrdma_gid_sockaddr("10.0.0.1", 1, &ss), -EINVAL);
	uri("rdma://[gid:fe80::1]:7", &u);
	assert_int_equal(xrdma_sockaddr(&u, false, &ss, err, sizeof(err)), 0);
	assert_int_equal(ss.ss_family, AF_IB);
	if (!have) {
		/* no tcp:// to suggest for an InfiniBand address */
		uint8_t rep[XRC_PRIV_MAX];
		size_t replen = 0;

		assert_null(xrc_connect(&u, NULL, "x", 1, rep, &replen, err, sizeof(err)));
		one_line(err);
		assert_true(strncmp(err, "rdma://[gid:fe80::1]:7: no RDMA device found", 44) == 0);
		assert_null(strstr(err, "instead"));
	} else {
		uint8_t rep[XRC_PRIV_MAX];
		size_t replen = 0;
		struct xrc_opts o = { .timeout_ns = 5 * XTIME_NS_PER_S };
		uint64_t t0 = xtime_ns();

		errno = 0;
		assert_null(xrc_connect(&u, &o, "x", 1, rep, &replen, err, sizeof(err)));
		print_message("%s (errno %d, %.1f s)\n", err, errno, (xtime_ns() - t0) / 1e9);
		assert_true(errno != 0);
		one_line(err);
		assert_true(strncmp(err, "rdma://[gid:fe80::1]:7: ", 24) == 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_available_why),
		cmocka_unit_test(test_list),
		cmocka_unit_test(test_auto),
		cmocka_unit_test(test_require),
		cmocka_unit_test(test_backends_without_rdma),
		cmocka_unit_test(test_gid),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
