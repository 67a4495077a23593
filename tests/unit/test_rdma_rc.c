/* rdma:// reliable connections on real RC queue pairs (xrc.h, xrc_rdma.c):
 * the contract every backend must honour (xrc_contract.h), then what only
 * an RDMA device has.  Runs where an active RDMA device exists --
 * tests/vm/xprt-vm -- and skips every test, with the reason, elsewhere. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>

#include "core/uri.h"
#include "xprt/xrc.h"
#include "rdma_test.h"
#include "xrc_contract.h"

static void rdma_check(void)
{
	RDMA_OR_SKIP();
}

/* Inline sizes the device cannot do are cut down to what it grants
 * (rxe: 512); XRC_INLINE above that is -EINVAL, at or below it works. */
static void test_inline_limit(void **state)
{
	const struct xrc_opts o = { .max_inline = 4096 };
	struct xrc *srv, *cli;
	static char rbuf[4096], big[4096];
	struct xrc_mr *rmr;
	struct xrc_wc wc;
	int rc;

	(void)state;
	RDMA_OR_SKIP();
	xc_pair_opts(&cli, &srv, &o, &o);
	rmr = xc_reg(srv, rbuf, sizeof(rbuf), XRC_ACCESS_LOCAL_WRITE);
	assert_int_equal(xrc_post_recv(srv, &(struct xrc_sge){ rbuf, sizeof(rbuf), rmr }, 1), 0);
	memset(big, 'i', sizeof(big));
	rc = xrc_post_send(cli, &(struct xrc_sge){ big, 4096, NULL }, 1, 2, XRC_INLINE);
	print_message("inline 4096: %d (max_inline %u)\n", rc, xrc_max_inline(cli));
	if (rc == -EINVAL) {
		assert_true(xrc_max_inline(cli) < 4096);
		/* 256 fits every device that has inline at all */
		assert_int_equal(xrc_post_send(cli, &(struct xrc_sge){ big, 256, NULL }, 1, 2,
					       XRC_INLINE | XRC_SIGNALED), 0);
		xc_get_wc(srv, cli, &wc);
		assert_int_equal(wc.status, 0);
		assert_int_equal(wc.len, 256);
		xc_expect_wc(cli, srv, 2, XRC_OP_SEND, 0);
	} else {
		assert_int_equal(rc, 0);
		xc_get_wc(srv, cli, &wc);
		assert_int_equal(wc.len, 4096);
	}
	xrc_close(cli);
	xrc_close(srv);
	xrc_dereg(rmr);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		XC_CONTRACT_TESTS,
		cmocka_unit_test(test_inline_limit),
	};

	XC.scheme = XURI_RDMA;
	snprintf(XC.host, sizeof(XC.host), "%s", rdma_test_ip());
	XC.check = rdma_check;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
