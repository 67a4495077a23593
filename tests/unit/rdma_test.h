/* Shared by the RDMA unit tests (test_rdma_rc.c, test_rdma_ud.c,
 * test_rdma_ibc.c, test_xdev.c): they run for real where an active RDMA device exists
 * (inside tests/vm/xprt-vm) and skip, saying why, everywhere else.
 * Include after <cmocka.h>. */
#ifndef XPRT_TESTS_RDMA_TEST_H
#define XPRT_TESTS_RDMA_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/uri.h"

#include "xprt/xdev.h"
#include "xprt/xdg.h"

/* The address of the RDMA netdev: the VM's 10.200.0.1 unless told. */
static inline const char *rdma_test_ip(void)
{
	const char *ip = getenv("XPRT_TEST_RDMA_IP");

	if (!ip)
		ip = getenv("XPRT_VM_IP");
	return ip ? ip : "10.200.0.1";
}

/* A URI built directly: xuri_parse() refuses port 0, which the
 * backends take as "pick a free one". */
static inline void rdma_test_uri(struct xuri *u, enum xuri_scheme s, const char *host,
				 uint16_t port)
{
	memset(u, 0, sizeof(*u));
	u->scheme = s;
	snprintf(u->host, sizeof(u->host), "%s", host);
	u->port = port;
}

/* A ud:// endpoint on the RDMA netdev, any free port; the test fails with
 * the reason when it cannot open. */
static inline struct xdg *rdma_test_ud_open(const struct xdg_opts *o)
{
	char err[256];
	struct xuri u;
	struct xdg *d;

	rdma_test_uri(&u, XURI_UD, rdma_test_ip(), 0);
	d = xdg_open(&u, o, err, sizeof(err));
	if (!d)
		fail_msg("open: %s", err);
	return d;
}

/* Skips the calling test, with the reason on stdout, when there is no
 * active RDMA device.  Run them for real with tests/vm/xprt-vm. */
#define RDMA_OR_SKIP()								\
	do {									\
		char why_[256];							\
		if (!xdev_rdma_available(why_, sizeof(why_))) {			\
			print_message("SKIP: %s (run inside tests/vm/xprt-vm)\n",	\
				      why_);					\
			skip();							\
		}								\
	} while (0)

#endif
