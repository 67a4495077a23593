/* The reliable-connection contract of xrc.h as one suite, run against each
 * backend: test_xrc_tcp.c runs it over tcp:// on loopback, test_rdma_rc.c
 * over rdma:// on the address of an RDMA device.  Include after <cmocka.h>;
 * the including file fills XC in its main() and lists XC_CONTRACT_TESTS
 * among its tests.
 *
 * Both ends of every connection live in this process.  The connect runs on
 * a thread of its own while the main thread accepts (rdma_cm needs both
 * sides moving at once); after that one thread drives both ends.  "a" is
 * always the connecting end and the initiator of writes and reads, "b" the
 * accepting end and their target.
 *
 * Waiting for a completion of one end also drives the other with
 * xrc_poll(peer, NULL, 0): a tcp target applies writes and serves reads
 * only inside its own xrc_poll(), while an RDMA device answers them by
 * itself and the call is harmless there.
 *
 * Everything asserted here is what xrc.h promises on every backend.  Where
 * the backends differ by design, a test branches on XC.scheme and says why
 * (verbs/IBA rules for rdma, doc/xrc-tcp-framing.md for tcp). */
#ifndef XPRT_TESTS_XRC_CONTRACT_H
#define XPRT_TESTS_XRC_CONTRACT_H

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/uri.h"
#include "core/xtime.h"
#include "xprt/xrc.h"

#define XC_TMO (10 * XTIME_NS_PER_S)	/* generous: a VM's software RDMA device is slow */

/* The backend under test. */
static struct xrc_contract {
	enum xuri_scheme scheme;	/* XURI_TCP or XURI_RDMA */
	char host[64];			/* address to listen on and to connect to */
	void (*check)(void);		/* first thing every contract test runs: may skip() it */
} XC;

static void xc_begin(void)
{
	if (XC.check)
		XC.check();
}

/* --- connection setup ---------------------------------------------------- */

static struct xuri xc_uri(uint16_t port)
{
	struct xuri u;

	memset(&u, 0, sizeof(u));	/* not xuri_parse(): it refuses port 0 */
	u.scheme = XC.scheme;
	snprintf(u.host, sizeof(u.host), "%s", XC.host);
	u.port = port;
	return u;
}

/* o, or defaults, with the generous timeout. */
static struct xrc_opts xc_opts(const struct xrc_opts *o)
{
	struct xrc_opts r = o ? *o : (struct xrc_opts){ 0 };

	if (!r.timeout_ns)
		r.timeout_ns = XC_TMO;
	return r;
}

/* "ADDR:PORT" of XC.host (xrc_peer(), xrc_req_peer()). */
static bool xc_is_host_port(const char *s)
{
	size_t n = strlen(XC.host);

	return strncmp(s, XC.host, n) == 0 && s[n] == ':' && s[n + 1] >= '1' && s[n + 1] <= '9';
}

/* Private data as the other end sees it.  tcp carries exactly the bytes
 * sent (the frame's len field); rdma_cm hands them over padded with zeros
 * to the CM message's fixed size, capped at XRC_PRIV_MAX, so there the
 * bytes sent are only a prefix. */
static void xc_assert_priv(const void *d, size_t n, const void *want, size_t wantlen)
{
	if (XC.scheme == XURI_TCP)
		assert_int_equal(n, wantlen);
	else
		assert_true(n >= wantlen && n <= XRC_PRIV_MAX);
	assert_memory_equal(d, want, wantlen);
}

struct xc_client {
	struct xuri u;
	struct xrc_opts o;
	const void *priv;
	size_t privlen;
	struct xrc *c;
	uint8_t rep[XRC_PRIV_MAX];
	size_t replen;
	int err_no;
	char err[256];
	pthread_t t;
};

static void *xc_client_main(void *arg)
{
	struct xc_client *cl = arg;

	cl->c = xrc_connect(&cl->u, &cl->o, cl->priv, cl->privlen, cl->rep, &cl->replen, cl->err,
			    sizeof(cl->err));
	cl->err_no = cl->c ? 0 : errno;
	return NULL;
}

/* Connects to *u on a thread of its own; xc_connect_join() waits for it. */
static void xc_connect_start_uri(struct xc_client *cl, const struct xuri *u,
				 const struct xrc_opts *o, const void *priv, size_t privlen)
{
	memset(cl, 0, sizeof(*cl));
	cl->u = *u;
	cl->o = xc_opts(o);
	cl->priv = priv;
	cl->privlen = privlen;
	assert_int_equal(pthread_create(&cl->t, NULL, xc_client_main, cl), 0);
}

static void xc_connect_start(struct xc_client *cl, uint16_t port, const struct xrc_opts *o,
			     const void *priv, size_t privlen)
{
	struct xuri u = xc_uri(port);

	xc_connect_start_uri(cl, &u, o, priv, privlen);
}

static void xc_connect_join(struct xc_client *cl)
{
	assert_int_equal(pthread_join(cl->t, NULL), 0);
}

/* A listener on XC.host, on a free port. */
static struct xrc_listener *xc_listen(const struct xrc_opts *o)
{
	struct xuri u = xc_uri(0);
	struct xrc_opts lo = xc_opts(o);
	char err[256];
	struct xrc_listener *l = xrc_listen(&u, &lo, err, sizeof(err));

	if (!l)
		fail_msg("listen: %s", err);
	assert_true(xrc_listener_port(l) > 0);
	return l;
}

/* The next complete request, waiting on the listener's fd. */
static struct xrc_req *xc_next_req(struct xrc_listener *l)
{
	uint64_t end = xtime_ns() + XC_TMO;
	char err[256];

	while (xtime_ns() < end) {
		struct pollfd p = { xrc_listener_fd(l), POLLIN, 0 };
		struct xrc_req *r = xrc_get_request(l, err, sizeof(err));

		if (r)
			return r;
		if (errno != EAGAIN)
			fail_msg("get_request: %s", err);
		poll(&p, 1, 100);
	}
	fail_msg("no connect request");
	return NULL;
}

/* Polls c until it leaves XRC_CONNECTING.  xrc_accept() never waits for
 * the peer: an accepted rdma connection turns XRC_UP in xrc_poll() when
 * the handshake completes; tcp ones (and every connecting end) are up at
 * once. */
static void xc_wait_up(struct xrc *c)
{
	uint64_t end = xtime_ns() + XC_TMO;

	while (xrc_state(c) == XRC_CONNECTING && xtime_ns() < end) {
		assert_int_equal(xrc_poll(c, NULL, 0), 0);
		if (xrc_state(c) == XRC_CONNECTING)
			xrc_wait(c, 10 * XTIME_NS_PER_MS);
	}
	assert_int_equal(xrc_state(c), XRC_UP);
}

/* Polls c until it is XRC_DOWN (on rdma: until the CM has told it). */
static void xc_wait_down(struct xrc *c)
{
	uint64_t end = xtime_ns() + XC_TMO;

	while (xrc_state(c) != XRC_DOWN && xtime_ns() < end) {
		assert_int_equal(xrc_poll(c, NULL, 0), 0);
		if (xrc_state(c) != XRC_DOWN)
			xrc_wait(c, 10 * XTIME_NS_PER_MS);
	}
	assert_int_equal(xrc_state(c), XRC_DOWN);
}

/* A connected pair, both ends XRC_UP.  a: the connecting end with options
 * ao, b: the accepting end with bo (NULL: defaults). */
static void xc_pair_opts(struct xrc **a, struct xrc **b, const struct xrc_opts *ao,
			 const struct xrc_opts *bo)
{
	struct xrc_opts so = xc_opts(bo);
	struct xrc_listener *l = xc_listen(&so);
	struct xc_client cl;
	char err[256];

	xc_connect_start(&cl, xrc_listener_port(l), ao, NULL, 0);
	*b = xrc_accept(xc_next_req(l), NULL, 0, &so, err, sizeof(err));
	xc_connect_join(&cl);
	if (!*b || !cl.c)
		fail_msg("accept: %s / connect: %s", *b ? "ok" : err, cl.c ? "ok" : cl.err);
	*a = cl.c;
	xc_wait_up(*a);
	xc_wait_up(*b);
	xrc_listener_close(l);
}

static void xc_pair(struct xrc **a, struct xrc **b) { xc_pair_opts(a, b, NULL, NULL); }

static struct xrc_mr *xc_reg(struct xrc *c, void *p, size_t len, unsigned access)
{
	char err[256];
	struct xrc_mr *mr = xrc_reg(xrc_domain(c), p, len, access, err, sizeof(err));

	if (!mr)
		fail_msg("register: %s", err);
	return mr;
}

/* A window in c's domain.  An RDMA device without memory windows skips
 * the test (xrc.h: EOPNOTSUPP); anything else is a failure. */
static struct xrc_win *xc_win_new(struct xrc *c, unsigned flags)
{
	char err[256];
	struct xrc_win *w = xrc_win_new(xrc_domain(c), flags, err, sizeof(err));

	if (!w && errno == EOPNOTSUPP && XC.scheme == XURI_RDMA) {
		print_message("SKIP: %s\n", err);
		skip();
	}
	if (!w)
		fail_msg("window: %s", err);
	return w;
}

/* --- completions --------------------------------------------------------- */

/* One completion of c, driving peer meanwhile (peer may be c itself). */
static void xc_get_wc(struct xrc *c, struct xrc *peer, struct xrc_wc *wc)
{
	uint64_t end = xtime_ns() + XC_TMO;

	while (xtime_ns() < end) {
		if (xrc_poll(c, wc, 1) == 1)
			return;
		assert_int_equal(xrc_poll(peer, NULL, 0), 0);
		if (XC.scheme == XURI_TCP) {
			/* the socket needs no arming; the peer's socket must wake
			 * us too, since its xrc_poll() is what answers c */
			struct pollfd p[2] = { { xrc_fd(c), POLLIN, 0 },
					       { xrc_fd(peer), POLLIN, 0 } };

			poll(p, 2, 10);
		} else {
			/* the device answers c by itself: sleep on c alone
			 * (xrc_wait arms its fd) */
			xrc_wait(c, 10 * XTIME_NS_PER_MS);
		}
	}
	fail_msg("no completion");
}

static void xc_expect_wc(struct xrc *c, struct xrc *peer, uint64_t wr_id, enum xrc_op op,
			 int status)
{
	struct xrc_wc wc;

	xc_get_wc(c, peer, &wc);
	assert_int_equal(wc.wr_id, wr_id);
	assert_int_equal(wc.op, op);
	assert_int_equal(wc.status, status);
}

/* A signaled write of len bytes at src (in lmr) to raddr under rkey; its
 * completion status. */
static int xc_write_st(struct xrc *a, struct xrc *b, struct xrc_mr *lmr, void *src,
		       uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct xrc_sge s = { src, len, lmr };
	struct xrc_wc wc;

	assert_int_equal(xrc_post_write(a, &s, 1, raddr, rkey, false, 0, 4242, XRC_SIGNALED), 0);
	xc_get_wc(a, b, &wc);
	assert_int_equal(wc.wr_id, 4242);
	assert_int_equal(wc.op, XRC_OP_WRITE);
	return wc.status;
}

static int xc_read_st(struct xrc *a, struct xrc *b, struct xrc_mr *lmr, void *dst,
		      uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct xrc_sge s = { dst, len, lmr };
	struct xrc_wc wc;

	assert_int_equal(xrc_post_read(a, &s, 1, raddr, rkey, 4343, XRC_SIGNALED), 0);
	xc_get_wc(a, b, &wc);
	assert_int_equal(wc.wr_id, 4343);
	assert_int_equal(wc.op, XRC_OP_READ);
	return wc.status;
}

/* --- refused requests ----------------------------------------------------
 * A pair whose target may refuse its initiator's requests.  How a refusal
 * ends is the one thing xrc.h leaves to the backend:
 *   tcp:  the target answers NAK, leaves its memory alone and both ends
 *         carry on (doc/xrc-tcp-framing.md, WRITE); both count it;
 *   rdma: a Remote Access Error NAK is not retried and is fatal to an RC
 *         QP (IBA 9.9, responder errors): the initiator's connection goes
 *         XRC_DOWN with the failed completion, the target's QP goes to the
 *         error state and its connection follows when the CM says so.
 * xc_refused() checks what follows and, where the pair died, puts a fresh
 * one in its place with the same options: regions and windows belong to
 * the domain, which outlives connections, so a test goes on with them. */

struct xc_pair {
	struct xrc *a, *b;
	struct xrc_opts o;	/* both ends */
	uint64_t refused;	/* a's requests refused on this pair */
};

static void xc_pair_up(struct xc_pair *p)
{
	xc_pair_opts(&p->a, &p->b, &p->o, &p->o);
	p->refused = 0;
}

static void xc_pair_down(struct xc_pair *p)
{
	xrc_close(p->a);
	xrc_close(p->b);
	p->a = p->b = NULL;
}

/* st: the status of a request of p->a that p->b had to refuse. */
static void xc_refused(struct xc_pair *p, int st)
{
	struct xrc_stats s;

	assert_int_equal(st, -EREMOTEIO);
	p->refused++;
	xrc_get_stats(p->a, &s);
	assert_int_equal(s.remote_errors, p->refused);
	if (XC.scheme == XURI_TCP) {
		xrc_get_stats(p->b, &s);
		assert_int_equal(s.remote_errors, p->refused);
		assert_int_equal(xrc_state(p->a), XRC_UP);
		assert_int_equal(xrc_state(p->b), XRC_UP);
		return;
	}
	assert_int_equal(xrc_state(p->a), XRC_DOWN);
	assert_int_equal(xrc_post_send(p->a, NULL, 0, 0, 0), -ENOTCONN);
	xc_wait_down(p->b);
	xc_pair_down(p);
	xc_pair_up(p);
}

/* --- the contract --------------------------------------------------------- */

/* Private data both ways; what each end says about the connection. */
static void test_connect_private_data(void **state)
{
	static const char req[] = "hello-server", acc[] = "welcome";
	const struct xrc_opts co = { .max_send = 32768 };
	const struct xrc_opts so = xc_opts(NULL);
	struct xrc_listener *l;
	struct xc_client cl;
	struct xrc_req *r;
	struct xrc *s;
	const void *d;
	size_t n;
	char err[256];

	(void)state;
	xc_begin();
	l = xc_listen(NULL);
	xc_connect_start(&cl, xrc_listener_port(l), &co, req, strlen(req));
	r = xc_next_req(l);
	d = xrc_req_data(r, &n);
	xc_assert_priv(d, n, req, strlen(req));
	assert_true(xc_is_host_port(xrc_req_peer(r)));
	s = xrc_accept(r, acc, strlen(acc), &so, err, sizeof(err));
	xc_connect_join(&cl);
	if (!s)
		fail_msg("accept: %s", err);
	if (!cl.c)
		fail_msg("connect: %s", cl.err);
	xc_assert_priv(cl.rep, cl.replen, acc, strlen(acc));
	xc_wait_up(s);
	assert_int_equal(xrc_state(cl.c), XRC_UP);
	assert_int_equal(xrc_scheme(s), XC.scheme);
	assert_int_equal(xrc_scheme(cl.c), XC.scheme);
	assert_true(xc_is_host_port(xrc_peer(s)));
	assert_true(xc_is_host_port(xrc_peer(cl.c)));
	assert_int_equal(xrc_max_send(cl.c), 32768);
	if (XC.scheme == XURI_TCP)	/* CONN_REQ/ACC: both use the smaller max_send */
		assert_int_equal(xrc_max_send(s), 32768);
	else	/* rdma_cm negotiates nothing: each end keeps its own options */
		assert_int_equal(xrc_max_send(s), 64 * 1024);
	assert_int_equal(xrc_sq_depth(s), 128);
	assert_int_equal(xrc_sq_depth(cl.c), 128);
	/* both ends in one process: one domain (tcp: the process's, rdma:
	 * the device's) */
	assert_ptr_equal(xrc_domain(s), xrc_domain(cl.c));
	xrc_close(cl.c);
	xrc_close(s);
	xrc_listener_close(l);
}

static void test_reject_with_data(void **state)
{
	struct xrc_listener *l;
	struct xc_client cl;
	char us[300], want[340];

	(void)state;
	xc_begin();
	l = xc_listen(NULL);
	xc_connect_start(&cl, xrc_listener_port(l), NULL, "let-me-in", 9);
	xrc_reject(xc_next_req(l), "go-away", 7);
	xc_connect_join(&cl);
	assert_null(cl.c);
	assert_int_equal(cl.err_no, ECONNREFUSED);
	xuri_format(&cl.u, us, sizeof(us));
	snprintf(want, sizeof(want), "%s: rejected by peer", us);
	assert_string_equal(cl.err, want);
	xc_assert_priv(cl.rep, cl.replen, "go-away", 7);
	xrc_listener_close(l);
}

/* A port nobody listens on (any more). */
static void test_connect_refused(void **state)
{
	struct xrc_listener *l;
	struct xrc_opts o = xc_opts(NULL);
	struct xuri u;
	char us[300], want[340], err[256];
	int e;

	(void)state;
	xc_begin();
	l = xc_listen(NULL);
	u = xc_uri(xrc_listener_port(l));
	xrc_listener_close(l);
	assert_null(xrc_connect(&u, &o, NULL, 0, NULL, NULL, err, sizeof(err)));
	e = errno;
	xuri_format(&u, us, sizeof(us));
	snprintf(want, sizeof(want), "%s: connection refused", us);
	/* one line that names the endpoint */
	assert_true(strncmp(err, us, strlen(us)) == 0 && err[strlen(us)] == ':');
	assert_null(strchr(err, '\n'));
	if (e == ECONNREFUSED)
		assert_string_equal(err, want);
	if (XC.scheme == XURI_RDMA) {
		/* The peer's CM answers a REQ for a port without listener with
		 * a REJ (refused), but the route or the REQ itself may also
		 * fail first. */
		print_message("rdma connect to a closed port: %s\n", err);
		assert_true(e == ECONNREFUSED || e == EHOSTUNREACH || e == ETIMEDOUT);
	} else {
		/* nothing listens: the kernel answers the SYN with a RST */
		assert_int_equal(e, ECONNREFUSED);
	}
}

/* SEND: gather lists, inline, immediates, xrc_send_inline(), and what is
 * refused at the post. */
static void test_send_recv(void **state)
{
	const struct xrc_opts o = { .tos = 32 };	/* tcp: IP_TOS, rdma: RDMA_OPTION_ID_TOS */
	struct xrc *a, *b;
	static char rbuf[5][64], sbuf[128];
	char tmp[16] = "inline!", hdr[8] = "HDR:", pay[16] = "payload";
	struct xrc_mr *rmr, *smr;
	struct xrc_sge g3[3] = { { sbuf, 3, NULL }, { sbuf + 16, 5, NULL }, { sbuf + 32, 2, NULL } };
	struct xrc_sge g2[2] = { { sbuf + 48, 2, NULL }, { sbuf + 64, 3, NULL } };
	struct xrc_sge g5[5];
	struct xrc_wc wc;
	struct xrc_stats st;
	int rc;

	(void)state;
	xc_begin();
	xc_pair_opts(&a, &b, &o, &o);
	rmr = xc_reg(b, rbuf, sizeof(rbuf), XRC_ACCESS_LOCAL_WRITE);
	smr = xc_reg(a, sbuf, sizeof(sbuf), 0);
	for (int i = 0; i < 3; i++)
		g3[i].mr = smr;
	for (int i = 0; i < 2; i++)
		g2[i].mr = smr;
	for (int i = 0; i < 5; i++) {
		assert_int_equal(xrc_post_recv(b, &(struct xrc_sge){ rbuf[i], 64, rmr },
					       100 + (uint64_t)i), 0);
		g5[i] = (struct xrc_sge){ sbuf, 1, smr };
	}
	memcpy(sbuf, "abc", 3);
	memcpy(sbuf + 16, "defgh", 5);
	memcpy(sbuf + 32, "ij", 2);
	memcpy(sbuf + 48, "ab", 2);
	memcpy(sbuf + 64, "cd", 3);	/* with its NUL */
	assert_int_equal(xrc_post_send(a, g3, 3, 1, XRC_SIGNALED), 0);
	/* inline: no region needed, the bytes are copied at the post */
	assert_int_equal(xrc_post_send(a, &(struct xrc_sge){ tmp, 7, NULL }, 1, 2,
				       XRC_SIGNALED | XRC_INLINE), 0);
	memset(tmp, 'x', sizeof(tmp));
	assert_int_equal(xrc_post_send_imm(a, g2, 2, 0xdeadbeef, 3, XRC_SIGNALED), 0);
	/* header and payload joined, from unregistered memory, copied at the post */
	assert_int_equal(xrc_send_inline(a, hdr, 4, pay, 7, 4, XRC_SIGNALED), 0);
	memset(pay, 'x', sizeof(pay));

	xc_get_wc(b, a, &wc);
	assert_int_equal(wc.wr_id, 100);
	assert_int_equal(wc.op, XRC_OP_RECV);
	assert_int_equal(wc.status, 0);
	assert_int_equal(wc.len, 10);
	assert_false(wc.has_imm);
	assert_false(wc.has_inv);
	assert_memory_equal(rbuf[0], "abcdefghij", 10);
	xc_get_wc(b, a, &wc);
	assert_int_equal(wc.wr_id, 101);
	assert_int_equal(wc.op, XRC_OP_RECV);
	assert_int_equal(wc.len, 7);
	assert_memory_equal(rbuf[1], "inline!", 7);
	xc_get_wc(b, a, &wc);
	assert_int_equal(wc.wr_id, 102);
	assert_int_equal(wc.op, XRC_OP_RECV);
	assert_int_equal(wc.len, 5);
	assert_true(wc.has_imm);
	assert_int_equal(wc.imm, 0xdeadbeef);
	assert_memory_equal(rbuf[2], "abcd", 5);
	xc_get_wc(b, a, &wc);
	assert_int_equal(wc.wr_id, 103);
	assert_int_equal(wc.op, XRC_OP_RECV);
	assert_int_equal(wc.len, 11);
	assert_memory_equal(rbuf[3], "HDR:payload", 11);
	for (uint64_t i = 1; i <= 4; i++)
		xc_expect_wc(a, b, i, XRC_OP_SEND, 0);
	xrc_get_stats(a, &st);
	assert_int_equal(st.sends, 4);
	xrc_get_stats(b, &st);
	assert_int_equal(st.recvs, 4);

	/* refused at the post: too many gather entries, inline above
	 * xrc_max_inline(), a SEND above xrc_max_send() */
	assert_int_equal(xrc_post_send(a, g5, 5, 9, 0), -EINVAL);
	assert_int_equal(xrc_post_send(a, &(struct xrc_sge){ sbuf, 100, smr }, 1, 9, XRC_INLINE),
			 -EINVAL);
	assert_int_equal(xrc_post_send(a, &(struct xrc_sge){ sbuf, xrc_max_send(a) + 1, smr }, 1, 9,
				       0), -EMSGSIZE);
	assert_int_equal(xrc_send_inline(a, hdr, 4, NULL, 0, 9, XRC_INLINE), -EINVAL);
	assert_int_equal(xrc_send_inline(a, hdr, 4, NULL, 8, 9, 0), -EINVAL);
	assert_int_equal(xrc_send_inline(a, sbuf, xrc_max_inline(a), hdr, 1, 9, 0), -EINVAL);
	assert_int_equal(xrc_send_inline(a, hdr, 4, sbuf, xrc_max_inline(a), 9, 0), -EINVAL);

	/* A gather entry without a region: an RDMA device reads every entry
	 * that is not inline through its lkey; tcp copies from plain memory
	 * (struct xrc_sge). */
	rc = xrc_post_send(a, &(struct xrc_sge){ sbuf, 4, NULL }, 1, 5, XRC_SIGNALED);
	if (XC.scheme == XURI_RDMA) {
		assert_int_equal(rc, -EINVAL);
	} else {
		assert_int_equal(rc, 0);
		xc_get_wc(b, a, &wc);
		assert_int_equal(wc.wr_id, 104);
		assert_int_equal(wc.len, 4);
		assert_memory_equal(rbuf[4], "abc", 4);
		xc_expect_wc(a, b, 5, XRC_OP_SEND, 0);
	}
	xrc_close(a);
	xrc_close(b);
	xrc_dereg(rmr);
	xrc_dereg(smr);
}

/* xrc_post_recvs(): a batch fills receives in order; a full queue takes
 * what fits and says how many. */
static void test_post_recvs(void **state)
{
	const struct xrc_opts o = { .rq_depth = 4 };
	struct xrc *a, *b;
	static char rbuf[6][16];
	struct xrc_sge sg[6];
	uint64_t id[6];
	struct xrc_mr *rmr;
	struct xrc_wc wc;

	(void)state;
	xc_begin();
	xc_pair_opts(&a, &b, &o, &o);
	assert_int_equal(xrc_rq_depth(b), 4);
	rmr = xc_reg(b, rbuf, sizeof(rbuf), XRC_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < 6; i++) {
		sg[i] = (struct xrc_sge){ rbuf[i], sizeof(rbuf[i]), rmr };
		id[i] = 500 + (uint64_t)i;
	}
	assert_int_equal(xrc_post_recvs(b, sg, id, 0), 0);
	assert_int_equal(xrc_post_recvs(b, NULL, id, 2), -EINVAL);
	/* rdma: a buffer in no region is refused, nothing posted (the device
	 * writes through an lkey); tcp receives into plain memory */
	if (XC.scheme == XURI_RDMA)
		assert_int_equal(xrc_post_recvs(b, &(struct xrc_sge){ rbuf[5], 8, NULL }, &id[5], 1),
				 -EINVAL);
	assert_int_equal(xrc_post_recvs(b, sg, id, 3), 3);
	/* one slot left: the fourth goes in, the rest not */
	assert_int_equal(xrc_post_recvs(b, &sg[3], &id[3], 3), 1);
	assert_int_equal(xrc_post_recvs(b, &sg[4], &id[4], 2), -ENOBUFS);
	for (int i = 0; i < 4; i++) {
		char m[8];

		snprintf(m, sizeof(m), "m%d", i);
		assert_int_equal(xrc_send_inline(a, m, 3, NULL, 0, (uint64_t)i, XRC_SIGNALED), 0);
	}
	for (int i = 0; i < 4; i++) {
		char m[8];

		xc_get_wc(b, a, &wc);
		assert_int_equal(wc.status, 0);
		assert_int_equal(wc.op, XRC_OP_RECV);
		assert_int_equal(wc.wr_id, 500 + i);
		snprintf(m, sizeof(m), "m%d", i);
		assert_string_equal(rbuf[i], m);
	}
	for (uint64_t i = 0; i < 4; i++)
		xc_expect_wc(a, b, i, XRC_OP_SEND, 0);
	xrc_close(a);
	xrc_close(b);
	xrc_dereg(rmr);
}

/* RDMA WRITE (with and without immediate, signaled or not) and READ
 * (scattered), small and large. */
static void test_write_read(void **state)
{
	enum { BIG = 4 << 20 };
	struct xrc *a, *b;
	static char region[8192], local[8192], rb[64];
	struct xrc_mr *rmr, *rbmr, *lmr, *tmr, *smr;
	uint8_t *tb, *sb, *bb;
	uintptr_t base = (uintptr_t)region;
	struct xrc_stats st;
	struct xrc_wc wc;

	(void)state;
	xc_begin();
	tb = malloc(BIG);
	sb = malloc(BIG);
	bb = malloc(BIG);
	assert_true(tb && sb && bb);
	xc_pair(&a, &b);
	rmr = xc_reg(b, region, sizeof(region), XRC_ACCESS_REMOTE_WRITE | XRC_ACCESS_REMOTE_READ);
	rbmr = xc_reg(b, rb, sizeof(rb), XRC_ACCESS_LOCAL_WRITE);
	lmr = xc_reg(a, local, sizeof(local), XRC_ACCESS_LOCAL_WRITE);
	for (size_t i = 0; i < sizeof(local); i++)
		local[i] = (char)(i * 13 + 7);

	/* plain write: a completion at the initiator only */
	assert_int_equal(xrc_post_write(a, &(struct xrc_sge){ local, 4096, lmr }, 1, base,
					rmr->rkey, false, 0, 1, XRC_SIGNALED), 0);
	xc_expect_wc(a, b, 1, XRC_OP_WRITE, 0);
	assert_memory_equal(region, local, 4096);
	assert_int_equal(xrc_poll(b, &wc, 1), 0);

	/* with immediate, unsignaled, up to the region's last byte: it
	 * consumes a posted receive, which gets len and imm; the initiator
	 * sees nothing */
	assert_int_equal(xrc_post_recv(b, &(struct xrc_sge){ rb, sizeof(rb), rbmr }, 50), 0);
	assert_int_equal(xrc_post_write(a, &(struct xrc_sge){ local + 4096, 1000, lmr }, 1,
					base + sizeof(region) - 1000, rmr->rkey, true, 77, 2, 0), 0);
	xc_get_wc(b, a, &wc);
	assert_int_equal(wc.wr_id, 50);
	assert_int_equal(wc.op, XRC_OP_RECV_IMM);
	assert_int_equal(wc.status, 0);
	assert_int_equal(wc.len, 1000);
	assert_true(wc.has_imm);
	assert_int_equal(wc.imm, 77);
	assert_memory_equal(region + sizeof(region) - 1000, local + 4096, 1000);
	assert_int_equal(xrc_poll(a, &wc, 1), 0);

	/* read into two scattered pieces */
	for (int i = 0; i < 3000; i++)
		region[4096 + i] = (char)(i * 7 + 3);
	memset(local, 0, 1000);
	memset(local + 6000, 0, 2000);
	struct xrc_sge rsg[2] = { { local, 1000, lmr }, { local + 6000, 2000, lmr } };
	assert_int_equal(xrc_post_read(a, rsg, 2, base + 4096, rmr->rkey, 3, XRC_SIGNALED), 0);
	xc_expect_wc(a, b, 3, XRC_OP_READ, 0);
	assert_memory_equal(local, region + 4096, 1000);
	assert_memory_equal(local + 6000, region + 5096, 2000);

	/* large: an unsignaled write, then a fenced read of it */
	for (size_t i = 0; i < BIG; i++)
		sb[i] = (uint8_t)(i * 7 + 3);
	tmr = xc_reg(b, tb, BIG, XRC_ACCESS_REMOTE_WRITE | XRC_ACCESS_REMOTE_READ);
	smr = xc_reg(a, sb, BIG, 0);
	struct xrc_mr *bmr = xc_reg(a, bb, BIG, XRC_ACCESS_LOCAL_WRITE);
	assert_int_equal(xrc_post_write(a, &(struct xrc_sge){ sb, BIG, smr }, 1, (uintptr_t)tb,
					tmr->rkey, false, 0, 4, 0), 0);
	assert_int_equal(xrc_post_read(a, &(struct xrc_sge){ bb, BIG, bmr }, 1, (uintptr_t)tb,
				       tmr->rkey, 5, XRC_SIGNALED | XRC_FENCE), 0);
	xc_expect_wc(a, b, 5, XRC_OP_READ, 0);	/* 4 was unsignaled */
	assert_memory_equal(tb, sb, BIG);
	assert_memory_equal(bb, sb, BIG);

	xrc_get_stats(a, &st);
	assert_int_equal(st.writes, 3);
	assert_int_equal(st.reads, 2);
	assert_int_equal(st.remote_errors, 0);
	xrc_close(a);
	xrc_close(b);
	xrc_dereg(rmr);
	xrc_dereg(rbmr);
	xrc_dereg(lmr);
	xrc_dereg(tmr);
	xrc_dereg(smr);
	xrc_dereg(bmr);
	free(tb);
	free(sb);
	free(bb);
}

/* The target checks key, bounds and access rights before it touches
 * memory: every kind of bad request completes -EREMOTEIO at the initiator
 * (unsignaled ones too) and leaves the target's memory alone. */
static void test_remote_access_errors(void **state)
{
	static char ro[256], wo[256], canary[256], gone_mem[16], src[32], rbuf[32], recvb[64];
	struct xc_pair p = { 0 };
	struct xrc_mr *mro, *mwo, *gone, *smr, *rmr, *rvmr;
	struct xrc_wc wc;
	uint64_t rob, wob;
	uint32_t stale;

	(void)state;
	xc_begin();
	xc_pair_up(&p);
	memset(ro, 'r', sizeof(ro));
	memset(wo, 'w', sizeof(wo));
	memset(src, 'A', sizeof(src));
	mro = xc_reg(p.b, ro, sizeof(ro), XRC_ACCESS_REMOTE_READ);
	mwo = xc_reg(p.b, wo, sizeof(wo), XRC_ACCESS_REMOTE_WRITE);
	rvmr = xc_reg(p.b, recvb, sizeof(recvb), XRC_ACCESS_LOCAL_WRITE);
	smr = xc_reg(p.a, src, sizeof(src), 0);
	rmr = xc_reg(p.a, rbuf, sizeof(rbuf), XRC_ACCESS_LOCAL_WRITE);
	gone = xc_reg(p.b, gone_mem, sizeof(gone_mem), XRC_ACCESS_REMOTE_WRITE);
	stale = gone->rkey;
	xrc_dereg(gone);
	rob = (uintptr_t)ro;
	wob = (uintptr_t)wo;

	const struct {
		bool read, imm;
		uint64_t raddr;
		uint32_t rkey;
		unsigned flags;
	} bad[] = {
		{ false, false, rob, mro->rkey, XRC_SIGNALED },		/* no REMOTE_WRITE */
		{ false, false, wob + 240, mwo->rkey, 0 },		/* past the end */
		{ false, true, wob - 1, mwo->rkey, XRC_SIGNALED },	/* before the start */
		{ false, false, UINT64_MAX - 8, mwo->rkey, XRC_SIGNALED },	/* wrapping */
		{ false, false, wob, stale, XRC_SIGNALED },		/* deregistered */
		{ false, false, wob, 0x12345678, XRC_SIGNALED },	/* invented */
		{ false, false, wob, mwo->rkey ^ 0x5500, 0 },		/* a live key, altered */
		{ true, false, wob, mwo->rkey, XRC_SIGNALED },		/* no REMOTE_READ */
		{ true, false, rob + 225, mro->rkey, XRC_SIGNALED },	/* past the end */
	};

	for (uint64_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(xrc_post_recv(p.b, &(struct xrc_sge){ recvb, sizeof(recvb), rvmr },
					       900 + i), 0);
		if (bad[i].read)
			assert_int_equal(xrc_post_read(p.a, &(struct xrc_sge){ rbuf, 32, rmr }, 1,
						       bad[i].raddr, bad[i].rkey, 1 + i,
						       bad[i].flags), 0);
		else
			assert_int_equal(xrc_post_write(p.a, &(struct xrc_sge){ src, 32, smr }, 1,
							bad[i].raddr, bad[i].rkey, bad[i].imm, 5,
							1 + i, bad[i].flags), 0);
		xc_get_wc(p.a, p.b, &wc);
		assert_int_equal(wc.wr_id, 1 + i);
		assert_int_equal(wc.op, bad[i].read ? XRC_OP_READ : XRC_OP_WRITE);
		memset(canary, 'r', sizeof(canary));
		assert_memory_equal(ro, canary, sizeof(ro));
		memset(canary, 'w', sizeof(canary));
		assert_memory_equal(wo, canary, sizeof(wo));
		if (XC.scheme == XURI_TCP) {
			xc_refused(&p, wc.status);
			/* the receive is still there (a refused write with
			 * immediate takes none): the next SEND lands in it */
			assert_int_equal(xrc_post_send(p.a, &(struct xrc_sge){ src, 32, smr }, 1,
						       100 + i, XRC_SIGNALED), 0);
			xc_expect_wc(p.a, p.b, 100 + i, XRC_OP_SEND, 0);
			xc_expect_wc(p.b, p.a, 900 + i, XRC_OP_RECV, 0);
		} else {
			/* The target's QP fails: its receive is flushed -- or,
			 * where the refused request had consumed it (a write
			 * with immediate), completes with the access error
			 * itself (IBA 9.9, responder class C errors). */
			xc_expect_wc(p.b, p.b, 900 + i, XRC_OP_RECV,
				     bad[i].imm ? -EREMOTEIO : -ECONNRESET);
			xc_refused(&p, wc.status);
		}
	}

	/* the last bytes of each region are inside it */
	assert_int_equal(xc_write_st(p.a, p.b, smr, src, 32, wob + 224, mwo->rkey), 0);
	assert_memory_equal(wo + 224, src, 32);
	assert_int_equal(xc_read_st(p.a, p.b, rmr, rbuf, 32, rob + 224, mro->rkey), 0);
	assert_memory_equal(rbuf, ro + 224, 32);
	xc_pair_down(&p);
	xrc_dereg(mro);
	xrc_dereg(mwo);
	xrc_dereg(rvmr);
	xrc_dereg(smr);
	xrc_dereg(rmr);
}

/* A SEND longer than the receive buffer it lands in: that receive fails
 * -EMSGSIZE and the connection fails at both ends, as a verbs QP goes to
 * the error state. */
static void test_recv_too_small(void **state)
{
	struct xrc *a, *b;
	static char rb[256], ar[64], msg[100];
	struct xrc_mr *rmr, *amr, *smr;
	struct xrc_wc wc;
	bool sent = false, flushed = false;
	/* rdma: the SEND fails, and a failed request completes signaled or
	 * not; tcp: it succeeds at the sender (below), so only a signaled one
	 * is seen */
	unsigned fl = XC.scheme == XURI_TCP ? XRC_SIGNALED : 0;

	(void)state;
	xc_begin();
	xc_pair(&a, &b);
	rmr = xc_reg(b, rb, sizeof(rb), XRC_ACCESS_LOCAL_WRITE);
	amr = xc_reg(a, ar, sizeof(ar), XRC_ACCESS_LOCAL_WRITE);
	smr = xc_reg(a, msg, sizeof(msg), 0);
	assert_int_equal(xrc_post_recv(a, &(struct xrc_sge){ ar, sizeof(ar), amr }, 70), 0);
	assert_int_equal(xrc_post_recv(b, &(struct xrc_sge){ rb, 16, rmr }, 1), 0);
	assert_int_equal(xrc_post_recv(b, &(struct xrc_sge){ rb + 64, 128, rmr }, 2), 0);
	assert_int_equal(xrc_post_send(a, &(struct xrc_sge){ msg, 100, smr }, 1, 10, fl), 0);
	xc_expect_wc(b, a, 1, XRC_OP_RECV, -EMSGSIZE);
	xc_expect_wc(b, a, 2, XRC_OP_RECV, -ECONNRESET);
	assert_int_equal(xrc_state(b), XRC_DOWN);
	assert_int_equal(xrc_post_recv(b, &(struct xrc_sge){ rb, 16, rmr }, 3), -ENOTCONN);
	/* the sender sees the connection fail (its two queues complete in
	 * order each, not with each other) */
	for (int i = 0; i < 2; i++) {
		xc_get_wc(a, b, &wc);
		if (wc.wr_id == 70) {
			assert_int_equal(wc.op, XRC_OP_RECV);
			assert_int_equal(wc.status, -ECONNRESET);
			flushed = true;
			continue;
		}
		assert_int_equal(wc.wr_id, 10);
		assert_int_equal(wc.op, XRC_OP_SEND);
		if (XC.scheme == XURI_TCP)	/* complete once in the kernel (framing doc) */
			assert_int_equal(wc.status, 0);
		else	/* NAKed by the responder, or flushed when the QP failed first */
			assert_true(wc.status == -EREMOTEIO || wc.status == -ECONNRESET);
		sent = true;
	}
	assert_true(sent && flushed);
	assert_int_equal(xrc_state(a), XRC_DOWN);
	assert_int_equal(xrc_post_send(a, &(struct xrc_sge){ msg, 1, smr }, 1, 11, 0), -ENOTCONN);
	xrc_close(a);
	xrc_close(b);
	xrc_dereg(rmr);
	xrc_dereg(amr);
	xrc_dereg(smr);
}

/* The peer goes away: every outstanding request completes -ECONNRESET,
 * each queue in order, and the connection is XRC_DOWN for good. */
static void test_peer_close_flushes(void **state)
{
	struct xrc *a, *b;
	static char rb[8][64], region[64], rd[64];
	struct xrc_mr *rbmr, *regmr, *rdmr;
	struct xrc_wc wc;
	uint64_t nrecv = 0;
	bool read = false;

	(void)state;
	xc_begin();
	xc_pair(&a, &b);
	rbmr = xc_reg(b, rb, sizeof(rb), XRC_ACCESS_LOCAL_WRITE);
	rdmr = xc_reg(b, rd, sizeof(rd), XRC_ACCESS_LOCAL_WRITE);
	regmr = xc_reg(a, region, sizeof(region), XRC_ACCESS_REMOTE_READ);
	for (int i = 0; i < 8; i++)
		assert_int_equal(xrc_post_recv(b, &(struct xrc_sge){ rb[i], 64, rbmr },
					       200 + (uint64_t)i), 0);
	/* nothing to complete yet: xrc_wait() times out */
	assert_int_equal(xrc_wait(b, 50 * XTIME_NS_PER_MS), 0);
	/* tcp: a never polls, so a read of its memory stays unanswered until
	 * it goes (the tcp target serves reads inside its xrc_poll()); an RDMA
	 * device would answer it by itself, so there only receives are left
	 * outstanding */
	if (XC.scheme == XURI_TCP)
		assert_int_equal(xrc_post_read(b, &(struct xrc_sge){ rd, 64, rdmr }, 1,
					       (uintptr_t)region, regmr->rkey, 9, 0), 0);
	xrc_close(a);
	for (int i = 0; i < (XC.scheme == XURI_TCP ? 9 : 8); i++) {
		xc_get_wc(b, b, &wc);
		assert_int_equal(wc.status, -ECONNRESET);
		if (wc.op == XRC_OP_READ) {	/* unsignaled, but failed */
			assert_int_equal(wc.wr_id, 9);
			assert_false(read);
			read = true;
			continue;
		}
		assert_int_equal(wc.op, XRC_OP_RECV);
		assert_int_equal(wc.wr_id, 200 + nrecv++);
	}
	assert_int_equal(xrc_state(b), XRC_DOWN);
	assert_int_equal(xrc_post_recv(b, &(struct xrc_sge){ rb[0], 64, rbmr }, 1), -ENOTCONN);
	assert_int_equal(xrc_post_send(b, &(struct xrc_sge){ rd, 1, rdmr }, 1, 1, 0), -ENOTCONN);
	assert_int_equal(xrc_poll(b, &wc, 1), 0);
	/* tcp's wait reports the dead socket; rdma's sleeps on its channels
	 * like any other (xrc.h leaves it open) */
	if (XC.scheme == XURI_TCP)
		assert_int_equal(xrc_wait(b, 0), -ENOTCONN);
	xrc_close(b);
	xrc_dereg(rbmr);
	xrc_dereg(regmr);
	xrc_dereg(rdmr);
}

/* Many messages through small queues, most unsignaled: the send queue
 * recycles the slots of unsignaled requests by itself, never reporting
 * them, and every message arrives intact and in order.  The first half
 * signals every 4th send, the second every 1000th. */
static bool many_signaled(uint32_t i, uint32_t total)
{
	return i == total - 1 || (i < total / 2 ? i % 4 == 3 : i % 1000 == 999);
}

static void test_many_messages(void **state)
{
	enum { DEPTH = 64, MAXLEN = 512, LENS = 412 };
	const char *env = getenv("XPRT_STRESS_MSGS");
	/* fewer by default on rdma: a software device in a VM is slower */
	uint32_t total = env ? (uint32_t)strtoul(env, NULL, 10)
			     : XC.scheme == XURI_RDMA ? 20000 : 100000;
	const struct xrc_opts o = { .sq_depth = DEPTH, .rq_depth = DEPTH, .max_send = MAXLEN };
	static uint8_t rbuf[DEPTH][MAXLEN], sbuf[DEPTH][MAXLEN];
	uint32_t posted = 0, received = 0, sig_total = 0, sig_seen = 0, enobufs = 0;
	uint64_t last_sig = UINT64_MAX;
	struct xrc *a, *b;
	struct xrc_mr *rmr, *smr;
	struct xrc_wc wc[DEPTH];

	(void)state;
	xc_begin();
	assert_true(total > 0);
	for (uint32_t i = 0; i < total; i++)
		sig_total += many_signaled(i, total);
	xc_pair_opts(&a, &b, &o, &o);
	rmr = xc_reg(b, rbuf, sizeof(rbuf), XRC_ACCESS_LOCAL_WRITE);
	smr = xc_reg(a, sbuf, sizeof(sbuf), 0);
	for (int i = 0; i < DEPTH; i++)
		assert_int_equal(xrc_post_recv(b, &(struct xrc_sge){ rbuf[i], MAXLEN, rmr },
					       (uint64_t)i), 0);
	while (received < total) {
		/* at most DEPTH messages in flight: the receiver always has a
		 * buffer for each (no RNR waits on rdma) */
		while (posted < total && posted - received < DEPTH) {
			uint32_t slot = posted % DEPTH, len = 4 + posted % LENS;
			unsigned fl = many_signaled(posted, total) ? XRC_SIGNALED : 0;
			int rc;

			for (uint32_t k = 0; k < len; k++)
				sbuf[slot][k] = (uint8_t)(posted + k);
			memcpy(sbuf[slot], &posted, 4);
			if (len <= 64 && posted % 2)
				fl |= XRC_INLINE;
			rc = xrc_post_send(a, &(struct xrc_sge){ sbuf[slot], len, smr }, 1, posted,
					   fl);
			if (rc == -ENOBUFS) {	/* slots not recycled yet: poll */
				enobufs++;
				break;
			}
			assert_int_equal(rc, 0);
			posted++;
		}
		int n = xrc_poll(a, wc, DEPTH);

		assert_true(n >= 0);
		for (int i = 0; i < n; i++) {
			assert_int_equal(wc[i].status, 0);
			assert_true(many_signaled((uint32_t)wc[i].wr_id, total));
			assert_true(last_sig == UINT64_MAX || wc[i].wr_id > last_sig);
			last_sig = wc[i].wr_id;
			sig_seen++;
		}
		n = xrc_poll(b, wc, DEPTH);
		assert_true(n >= 0);
		for (int i = 0; i < n; i++) {
			uint32_t seq, slot = (uint32_t)wc[i].wr_id, len = 4 + received % LENS;

			assert_int_equal(wc[i].status, 0);
			assert_int_equal(wc[i].op, XRC_OP_RECV);
			assert_int_equal(wc[i].len, len);
			memcpy(&seq, rbuf[slot], 4);
			assert_int_equal(seq, received);
			for (uint32_t k = 4; k < len; k++)
				if (rbuf[slot][k] != (uint8_t)(received + k))
					fail_msg("message %u byte %u", received, k);
			assert_int_equal(xrc_post_recv(b, &(struct xrc_sge){ rbuf[slot], MAXLEN, rmr },
						       slot), 0);
			received++;
		}
		if (!n)
			xrc_wait(b, XTIME_NS_PER_MS);
	}
	/* the last signaled ones may still be on their way */
	while (sig_seen < sig_total) {
		xc_get_wc(a, b, &wc[0]);
		assert_int_equal(wc[0].status, 0);
		assert_true(many_signaled((uint32_t)wc[0].wr_id, total));
		assert_true(last_sig == UINT64_MAX || wc[0].wr_id > last_sig);
		last_sig = wc[0].wr_id;
		sig_seen++;
	}
	assert_int_equal(last_sig, total - 1);
	print_message("%u messages, %u signaled completions, %u ENOBUFS\n", received, sig_seen,
		      enobufs);
	xrc_close(a);
	xrc_close(b);
	xrc_dereg(rmr);
	xrc_dereg(smr);
}

/* Type-1 memory windows: the key changes on every bind and is known when
 * the post returns; it serves every connection of the domain, also after
 * the connection it was bound through is gone; rebinding or invalidating
 * kills the old key; binds are send-queue work requests. */
static void test_window_bind_rebind(void **state)
{
	enum { RW = XRC_ACCESS_REMOTE_WRITE | XRC_ACCESS_REMOTE_READ };
	struct xc_pair p = { .o = { .sq_depth = 4 } }, q = { .o = { .sq_depth = 4 } };
	static char mem[8192], exact[512], lbuf[256];
	char *src = lbuf, *rd = lbuf + 128;
	struct xrc_mr *mr, *ex, *lmr;
	struct xrc_win *w, *we;
	uintptr_t base = (uintptr_t)mem;
	uint32_t k0, k1, k2, k3;
	int st;

	(void)state;
	xc_begin();
	xc_pair_up(&p);
	xc_pair_up(&q);
	assert_ptr_equal(xrc_domain(p.b), xrc_domain(q.b));
	memset(mem, '.', sizeof(mem));
	memset(src, 'A', 64);
	/* regions with no remote access of their own */
	mr = xc_reg(p.b, mem, sizeof(mem), XRC_ACCESS_LOCAL_WRITE);
	ex = xc_reg(p.b, exact, sizeof(exact), XRC_ACCESS_LOCAL_WRITE);
	lmr = xc_reg(p.a, lbuf, sizeof(lbuf), XRC_ACCESS_LOCAL_WRITE);
	w = xc_win_new(p.b, 0);
	we = xc_win_new(p.b, 0);
	k0 = xrc_win_rkey(w);
	/* never bound: its key grants nothing */
	xc_refused(&p, xc_write_st(p.a, p.b, lmr, src, 8, base, k0));

	assert_int_equal(xrc_win_bind(p.b, w, mr, mem + 1024, 1024, RW, 1, XRC_SIGNALED), 0);
	k1 = xrc_win_rkey(w);	/* known as soon as the post returns */
	assert_int_not_equal(k1, k0);
	assert_int_not_equal(k1, mr->rkey);
	xc_expect_wc(p.b, p.a, 1, XRC_OP_BIND, 0);
	assert_int_equal(xc_write_st(p.a, p.b, lmr, src, 64, base + 1024, k1), 0);
	assert_memory_equal(mem + 1024, src, 64);
	assert_int_equal(xc_read_st(p.a, p.b, lmr, rd, 64, base + 1024, k1), 0);
	assert_memory_equal(rd, src, 64);
	/* through the other connection of the domain */
	memset(src, 'B', 64);
	assert_int_equal(xc_write_st(q.a, q.b, lmr, src, 64, base + 1088, k1), 0);
	assert_memory_equal(mem + 1088, src, 64);
	memset(rd, 0, 128);
	assert_int_equal(xc_read_st(q.a, q.b, lmr, rd, 128, base + 1024, k1), 0);
	assert_int_equal(rd[0], 'A');
	assert_int_equal(rd[64], 'B');

	/* the window's bounds */
	if (XC.scheme == XURI_TCP) {
		/* tcp checks a request against the window, not the region */
		xc_refused(&p, xc_write_st(p.a, p.b, lmr, src, 8, base + 1020, k1));
		xc_refused(&p, xc_write_st(p.a, p.b, lmr, src, 8, base + 2044, k1));
		assert_int_equal(mem[1019], '.');
		assert_int_equal(mem[1023], '.');
		assert_int_equal(mem[2048], '.');
	} else {
		/* rxe checks a window request against the region under it
		 * (xrc.h): say what this device does */
		st = xc_write_st(p.a, p.b, lmr, src, 8, base + 1020, k1);
		print_message("write across the window's start, inside its region: %s (%s)\n",
			      st ? "refused" : "accepted", mem[1020] == 'B' ? "landed" : "not landed");
		if (st)
			xc_refused(&p, st);
	}
	/* over a region of exactly its size, a window's bounds hold on every
	 * backend */
	assert_int_equal(xrc_win_bind(p.b, we, ex, exact, sizeof(exact), RW, 20, XRC_SIGNALED), 0);
	xc_expect_wc(p.b, p.a, 20, XRC_OP_BIND, 0);
	assert_int_equal(xc_write_st(p.a, p.b, lmr, src, 8, (uintptr_t)exact + 504,
				     xrc_win_rkey(we)), 0);
	xc_refused(&p, xc_write_st(p.a, p.b, lmr, src, 8, (uintptr_t)exact + 508,
				   xrc_win_rkey(we)));
	/* the region's own key has no remote access */
	xc_refused(&p, xc_write_st(p.a, p.b, lmr, src, 8, base, mr->rkey));

	/* the refusals on p left q and the window alone; the connection the
	 * key was bound through goes, the key stays */
	xc_pair_down(&p);
	assert_int_equal(xc_write_st(q.a, q.b, lmr, src, 64, base + 1152, k1), 0);
	assert_memory_equal(mem + 1152, src, 64);

	/* rebind, unsignaled, through another connection, over another range
	 * with write access only */
	assert_int_equal(xrc_win_bind(q.b, w, mr, mem + 4096, 512, XRC_ACCESS_REMOTE_WRITE, 2, 0),
			 0);
	k2 = xrc_win_rkey(w);
	assert_int_not_equal(k2, k1);
	assert_int_equal(xc_write_st(q.a, q.b, lmr, src, 8, base + 4096 + 504, k2), 0);
	/* invalidate: no key of it is valid */
	assert_int_equal(xrc_win_invalidate(q.b, w, 3, XRC_SIGNALED), 0);
	xc_expect_wc(q.b, q.a, 3, XRC_OP_BIND, 0);	/* 2 was unsignaled */
	xc_refused(&q, xc_write_st(q.a, q.b, lmr, src, 8, base + 1024, k1));
	xc_refused(&q, xc_write_st(q.a, q.b, lmr, src, 8, base + 4096, k2));
	xc_refused(&q, xc_write_st(q.a, q.b, lmr, src, 8, base + 4096, xrc_win_rkey(w)));
	/* and it can be bound again */
	assert_int_equal(xrc_win_bind(q.b, w, mr, mem + 4096, 512, XRC_ACCESS_REMOTE_WRITE, 4,
				      XRC_SIGNALED), 0);
	xc_expect_wc(q.b, q.a, 4, XRC_OP_BIND, 0);
	k3 = xrc_win_rkey(w);
	assert_int_equal(xc_write_st(q.a, q.b, lmr, src, 8, base + 4096, k3), 0);
	xc_refused(&q, xc_read_st(q.a, q.b, lmr, rd, 8, base + 4096, k3));	/* no READ */
	assert_int_equal(xrc_win_bind(q.b, w, mr, mem, sizeof(mem), RW, 5, XRC_SIGNALED), 0);
	xc_expect_wc(q.b, q.a, 5, XRC_OP_BIND, 0);
	assert_int_equal(xc_write_st(q.a, q.b, lmr, src, 8, base + 8184, xrc_win_rkey(w)), 0);

	/* binds take send-queue slots, freed when polled */
	for (int i = 0; i < 4; i++)
		assert_int_equal(xrc_win_bind(q.b, w, mr, mem, 64, RW, 10 + (uint64_t)i,
					      i == 3 ? XRC_SIGNALED : 0), 0);
	assert_int_equal(xrc_win_bind(q.b, w, mr, mem, 64, RW, 14, 0), -ENOBUFS);
	xc_expect_wc(q.b, q.a, 13, XRC_OP_BIND, 0);
	assert_int_equal(xrc_win_bind(q.b, w, mr, mem, 64, RW, 15, XRC_SIGNALED), 0);
	xc_expect_wc(q.b, q.a, 15, XRC_OP_BIND, 0);

	/* refused at the post: empty, outside the region, local rights,
	 * inline, no region */
	assert_int_equal(xrc_win_bind(q.b, w, mr, mem, 0, RW, 9, 0), -EINVAL);
	assert_int_equal(xrc_win_bind(q.b, w, mr, mem + 8000, 256, RW, 9, 0), -EINVAL);
	assert_int_equal(xrc_win_bind(q.b, w, mr, (void *)(base - 1), 16, RW, 9, 0), -EINVAL);
	assert_int_equal(xrc_win_bind(q.b, w, mr, mem, 16, XRC_ACCESS_LOCAL_WRITE, 9, 0), -EINVAL);
	assert_int_equal(xrc_win_bind(q.b, w, mr, mem, 16, RW, 9, XRC_INLINE), -EINVAL);
	assert_int_equal(xrc_win_bind(q.b, w, NULL, mem, 16, RW, 9, 0), -EINVAL);

	k3 = xrc_win_rkey(w);
	assert_int_equal(xc_write_st(q.a, q.b, lmr, src, 8, base, k3), 0);
	if (XC.scheme == XURI_TCP) {
		/* tcp: deregistering a region kills the windows over it */
		xrc_dereg(mr);
		xc_refused(&q, xc_write_st(q.a, q.b, lmr, src, 8, base, k3));
		xrc_win_free(w);
	} else {
		/* rdma devices refuse to deregister memory under a bound
		 * window (IBA 10.6.7.2.6): the window goes first */
		xrc_win_free(w);
		xrc_dereg(mr);
	}
	xrc_win_free(we);
	xrc_win_free(NULL);
	xc_pair_down(&q);
	xrc_dereg(ex);
	xrc_dereg(lmr);
}

/* Binds on an otherwise idle send queue, more of them than it has slots,
 * each polled, then a WRITE: it goes out and lands once. */
static void test_window_binds_then_write(void **state)
{
	enum { RW = XRC_ACCESS_REMOTE_WRITE | XRC_ACCESS_REMOTE_READ };
	const struct xrc_opts o = { .sq_depth = 4 };
	struct xrc *a, *b;
	static char mem[256], buf[64];
	struct xrc_mr *mr, *bmr;
	struct xrc_sge rs = { buf, sizeof(buf), NULL };
	struct xrc_win *w;
	struct xrc_wc wc;

	(void)state;
	xc_begin();
	xc_pair_opts(&a, &b, &o, &o);
	mr = xc_reg(b, mem, sizeof(mem), XRC_ACCESS_LOCAL_WRITE);
	bmr = xc_reg(a, buf, sizeof(buf), XRC_ACCESS_LOCAL_WRITE);
	rs.mr = bmr;
	w = xc_win_new(b, 0);
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 11; i++) {
			assert_int_equal(xrc_win_bind(b, w, mr, mem, sizeof(mem), RW, 100 + (uint64_t)i,
						      XRC_SIGNALED), 0);
			xc_expect_wc(b, a, 100 + (uint64_t)i, XRC_OP_BIND, 0);
		}
		for (int i = 0; i < 2; i++)
			assert_int_equal(xrc_post_recv(a, &rs, 7 + (uint64_t)i), 0);
		/* a zero-length write with immediate, as a heartbeat */
		assert_int_equal(xrc_post_write(b, NULL, 0, 0, 0, true, 0x90000000u + (uint32_t)round,
						55, XRC_SIGNALED), 0);
		xc_get_wc(a, b, &wc);
		assert_int_equal(wc.op, XRC_OP_RECV_IMM);
		assert_int_equal(wc.status, 0);
		assert_int_equal(wc.imm, 0x90000000u + (uint32_t)round);
		xc_expect_wc(b, a, 55, XRC_OP_WRITE, 0);
		/* nothing else arrives; both ends stay up */
		for (int i = 0; i < 20; i++) {
			assert_int_equal(xrc_poll(a, &wc, 1), 0);
			assert_int_equal(xrc_poll(b, &wc, 1), 0);
			usleep(1000);
		}
		assert_int_equal(xrc_state(a), XRC_UP);
		assert_int_equal(xrc_state(b), XRC_UP);
		/* the spare receive is consumed by the next round's write */
		assert_int_equal(xrc_poll(a, &wc, 1), 0);
	}
	xrc_win_free(w);
	xrc_close(a);
	xrc_close(b);
	xrc_dereg(mr);
	xrc_dereg(bmr);
}

/* XRC_MORE: posts held back go out, in posting order, at the next post
 * without the flag, at xrc_flush(), at a poll and before a bind -- and
 * more of them than one chain takes (rdma: 16) too.  An inline payload is
 * the caller's to reuse as soon as the post returns, held or not. */
static void test_held_posts(void **state)
{
	enum { N = 40, L = 24 };
	struct xrc *a, *b;
	static char rbuf[N + 4][L], sbuf[N][L], wdst[64], mem[64];
	struct xrc_mr *rmr, *smr, *wmr, *mmr;
	struct xrc_win *w;
	struct xrc_wc wc;
	char tmp[L];
	uint64_t id = 1;

	(void)state;
	xc_begin();
	xc_pair_opts(&a, &b, &(struct xrc_opts){ .sq_depth = 64, .rq_depth = 64 },
		     &(struct xrc_opts){ .sq_depth = 64, .rq_depth = 64 });
	rmr = xc_reg(b, rbuf, sizeof(rbuf), XRC_ACCESS_LOCAL_WRITE);
	wmr = xc_reg(b, wdst, sizeof(wdst), XRC_ACCESS_LOCAL_WRITE | XRC_ACCESS_REMOTE_WRITE);
	smr = xc_reg(a, sbuf, sizeof(sbuf), 0);
	mmr = xc_reg(a, mem, sizeof(mem), XRC_ACCESS_LOCAL_WRITE);
	w = xc_win_new(a, 0);
	for (int i = 0; i < N + 4; i++)
		assert_int_equal(xrc_post_recv(b, &(struct xrc_sge){ rbuf[i], L, rmr },
					       100 + (uint64_t)i), 0);
	/* N sends and a write, all held; every fourth send inline from tmp,
	 * overwritten right after its post */
	for (int i = 0; i < N; i++) {
		snprintf(sbuf[i], L, "held %d", i);
		if (i % 4 == 3) {
			memcpy(tmp, sbuf[i], L);
			assert_int_equal(xrc_post_send(a, &(struct xrc_sge){ tmp, L, NULL }, 1, id++,
						       XRC_INLINE | XRC_MORE), 0);
			memset(tmp, 'x', sizeof(tmp));
		} else {
			assert_int_equal(xrc_post_send(a, &(struct xrc_sge){ sbuf[i], L, smr }, 1,
						       id++, XRC_MORE), 0);
		}
	}
	assert_int_equal(xrc_post_write(a, &(struct xrc_sge){ sbuf[0], L, smr }, 1,
					(uintptr_t)wdst, wmr->rkey, true, 77, id++,
					XRC_SIGNALED | XRC_MORE), 0);
	assert_true(xrc_flush(a) >= 0);
	for (int i = 0; i < N; i++) {
		xc_get_wc(b, a, &wc);
		assert_int_equal(wc.status, 0);
		assert_int_equal(wc.op, XRC_OP_RECV);
		assert_int_equal(wc.wr_id, 100 + (uint64_t)i);
		assert_int_equal(wc.len, L);
		assert_string_equal(rbuf[i], sbuf[i]);
	}
	xc_get_wc(b, a, &wc);
	assert_int_equal(wc.op, XRC_OP_RECV_IMM);
	assert_int_equal(wc.wr_id, 100 + N);
	assert_int_equal(wc.imm, 77);
	assert_string_equal(wdst, "held 0");
	xc_expect_wc(a, b, id - 1, XRC_OP_WRITE, 0);

	/* held, then only polled: xrc_poll() sends it */
	assert_int_equal(xrc_post_send_imm(a, &(struct xrc_sge){ sbuf[1], L, smr }, 1, 5, id++,
					   XRC_SIGNALED | XRC_MORE), 0);
	xc_get_wc(b, a, &wc);
	assert_int_equal(wc.wr_id, 101 + N);
	assert_true(wc.has_imm);
	assert_string_equal(rbuf[N + 1], "held 1");
	xc_expect_wc(a, b, id - 1, XRC_OP_SEND, 0);

	/* held, then a bind on the same connection: the send goes first */
	assert_int_equal(xrc_post_send(a, &(struct xrc_sge){ sbuf[2], L, smr }, 1, id++,
				       XRC_SIGNALED | XRC_MORE), 0);
	assert_int_equal(xrc_win_bind(a, w, mmr, mem, sizeof(mem), XRC_ACCESS_REMOTE_WRITE, id++,
				      XRC_SIGNALED), 0);
	if (XC.scheme == XURI_RDMA) {
		/* one send queue, completed in order */
		xc_expect_wc(a, b, id - 2, XRC_OP_SEND, 0);
		xc_expect_wc(a, b, id - 1, XRC_OP_BIND, 0);
	} else {
		for (int k = 0; k < 2; k++) {
			xc_get_wc(a, b, &wc);
			assert_int_equal(wc.status, 0);
			assert_true(wc.wr_id == id - 2 || wc.wr_id == id - 1);
		}
	}
	xc_get_wc(b, a, &wc);
	assert_int_equal(wc.wr_id, 102 + N);
	assert_string_equal(rbuf[N + 2], "held 2");
	xrc_win_free(w);
	xrc_close(a);
	xrc_close(b);
	xrc_dereg(rmr);
	xrc_dereg(wmr);
	xrc_dereg(smr);
	xrc_dereg(mmr);
}

/* Type-2 windows: the key serves only the connection the window was bound
 * through, whose peer may invalidate it with a send-with-invalidate; the
 * window must be invalid before it is bound again, and dies with its
 * connection. */
static void test_window_type2(void **state)
{
	enum { RW = XRC_ACCESS_REMOTE_WRITE | XRC_ACCESS_REMOTE_READ };
	struct xc_pair p = { 0 }, q = { 0 };
	static char mem[8192], lbuf[64], rb[64];
	struct xrc_mr *mr, *lmr, *rbmr;
	struct xrc_win *w;
	struct xrc_wc wc;
	uintptr_t base = (uintptr_t)mem;
	uint32_t k1, k2, k3;

	(void)state;
	xc_begin();
	xc_pair_up(&p);
	xc_pair_up(&q);
	memset(lbuf, 'S', sizeof(lbuf));
	mr = xc_reg(p.b, mem, sizeof(mem), XRC_ACCESS_LOCAL_WRITE);
	lmr = xc_reg(p.a, lbuf, sizeof(lbuf), XRC_ACCESS_LOCAL_WRITE);
	rbmr = xc_reg(p.b, rb, sizeof(rb), XRC_ACCESS_LOCAL_WRITE);
	w = xc_win_new(p.b, XRC_WIN_TYPE2);

	assert_int_equal(xrc_win_bind(p.b, w, mr, mem + 2048, 1024, RW, 1, 0), 0);
	k1 = xrc_win_rkey(w);
	/* still valid: not bound again */
	assert_int_equal(xrc_win_bind(p.b, w, mr, mem + 2048, 64, RW, 2, 0), -EBUSY);
	assert_int_equal(xc_write_st(p.a, p.b, lmr, lbuf, 32, base + 2048, k1), 0);
	assert_memory_equal(mem + 2048, lbuf, 32);
	/* not on another connection */
	xc_refused(&q, xc_write_st(q.a, q.b, lmr, lbuf, 32, base + 2048, k1));

	/* the peer invalidates it (empty, as RTRS answers NEED_INVAL): the
	 * receiver sees the key */
	assert_int_equal(xrc_post_recv(p.b, &(struct xrc_sge){ rb, sizeof(rb), rbmr }, 50), 0);
	assert_int_equal(xrc_post_send_inv(p.a, NULL, 0, k1, 5, XRC_SIGNALED), 0);
	xc_get_wc(p.b, p.a, &wc);
	assert_int_equal(wc.wr_id, 50);
	assert_int_equal(wc.op, XRC_OP_RECV);
	assert_int_equal(wc.status, 0);
	assert_int_equal(wc.len, 0);
	assert_true(wc.has_inv);
	assert_int_equal(wc.inv_rkey, k1);
	assert_false(wc.has_imm);
	xc_expect_wc(p.a, p.b, 5, XRC_OP_SEND, 0);
	xc_refused(&p, xc_write_st(p.a, p.b, lmr, lbuf, 32, base + 2048, k1));
	/* free again: binds anew, with a new key that works */
	assert_int_equal(xrc_win_bind(p.b, w, mr, mem + 4096, 1024, RW, 6, XRC_SIGNALED), 0);
	k2 = xrc_win_rkey(w);
	assert_int_not_equal(k2, k1);
	xc_expect_wc(p.b, p.a, 6, XRC_OP_BIND, 0);
	assert_int_equal(xc_write_st(p.a, p.b, lmr, lbuf, 32, base + 4096, k2), 0);

	/* invalidated locally: dead too, and free to bind */
	assert_int_equal(xrc_win_invalidate(p.b, w, 7, XRC_SIGNALED), 0);
	xc_expect_wc(p.b, p.a, 7, XRC_OP_BIND, 0);
	xc_refused(&p, xc_write_st(p.a, p.b, lmr, lbuf, 32, base + 4096, k2));
	assert_int_equal(xrc_win_bind(p.b, w, mr, mem, 1024, RW, 8, XRC_SIGNALED), 0);
	xc_expect_wc(p.b, p.a, 8, XRC_OP_BIND, 0);
	k3 = xrc_win_rkey(w);
	assert_int_not_equal(k3, k2);
	assert_int_equal(xc_write_st(p.a, p.b, lmr, lbuf, 32, base, k3), 0);

	/* its connection goes: the window can only be freed */
	xc_pair_down(&p);
	assert_int_equal(xrc_win_bind(q.b, w, mr, mem, 64, RW, 9, 0), -EBUSY);
	xrc_win_free(w);
	xc_pair_down(&q);
	xrc_dereg(mr);
	xrc_dereg(lmr);
	xrc_dereg(rbmr);
}

/* Send with invalidate of a type-1 window's key, and an 8-byte send with
 * immediate (an RTRS rkey_rsp). */
static void test_send_inv(void **state)
{
	enum { RW = XRC_ACCESS_REMOTE_WRITE };
	struct xc_pair p = { 0 };
	static char mem[1024], rb[4][16], lbuf[16];
	struct xrc_mr *mr, *rbmr, *lmr;
	struct xrc_win *w;
	struct xrc_wc wc;
	uintptr_t base = (uintptr_t)mem;
	uint32_t k;

	(void)state;
	xc_begin();
	xc_pair_up(&p);
	mr = xc_reg(p.b, mem, sizeof(mem), RW);
	rbmr = xc_reg(p.b, rb, sizeof(rb), XRC_ACCESS_LOCAL_WRITE);
	lmr = xc_reg(p.a, lbuf, sizeof(lbuf), 0);
	w = xc_win_new(p.b, 0);
	assert_int_equal(xrc_win_bind(p.b, w, mr, mem, 256, RW, 1, XRC_SIGNALED), 0);
	xc_expect_wc(p.b, p.a, 1, XRC_OP_BIND, 0);
	k = xrc_win_rkey(w);
	for (int i = 0; i < 4; i++)
		assert_int_equal(xrc_post_recv(p.b, &(struct xrc_sge){ rb[i], 16, rbmr },
					       60 + (uint64_t)i), 0);

	/* rkey_rsp buf_id 1 rkey 0x3dc, with an immediate: a RECV with has_imm */
	memcpy(lbuf, "\x04\x00\x01\x00\xdc\x03\x00\x00", 8);
	assert_int_equal(xrc_post_send_imm(p.a, &(struct xrc_sge){ lbuf, 8, lmr }, 1, 0x20000007,
					   4, XRC_SIGNALED), 0);
	xc_get_wc(p.b, p.a, &wc);
	assert_int_equal(wc.wr_id, 60);
	assert_int_equal(wc.op, XRC_OP_RECV);
	assert_int_equal(wc.status, 0);
	assert_int_equal(wc.len, 8);
	assert_true(wc.has_imm);
	assert_int_equal(wc.imm, 0x20000007);
	assert_false(wc.has_inv);
	assert_memory_equal(rb[0], lbuf, 8);
	xc_expect_wc(p.a, p.b, 4, XRC_OP_SEND, 0);

	memcpy(lbuf, "rkeyrsp", 8);
	assert_int_equal(xrc_post_send_inv(p.a, &(struct xrc_sge){ lbuf, 8, lmr }, 1, k, 5,
					   XRC_SIGNALED), 0);
	if (XC.scheme == XURI_RDMA) {
		/* A type-1 window cannot be invalidated by the peer (IBA
		 * o10-37.2.26): the receiver's device fails the receive and
		 * the connection; the sender's SEND may still complete. */
		xc_get_wc(p.b, p.a, &wc);
		assert_int_equal(wc.wr_id, 61);
		assert_int_equal(wc.status, -EREMOTEIO);
		assert_int_equal(xrc_state(p.b), XRC_DOWN);
		xc_get_wc(p.a, p.b, &wc);
		print_message("send-with-invalidate of a type-1 key: sender %d\n", wc.status);
		assert_int_equal(wc.wr_id, 5);
	} else {
		/* tcp invalidates a window valid for the connection, type 1
		 * too, and only reports any other key; the connection carries
		 * on (framing doc, SEND) */
		assert_int_equal(xrc_post_send_inv(p.a, NULL, 0, mr->rkey, 6, 0), 0);
		assert_int_equal(xrc_post_send_inv(p.a, NULL, 0, 0x0abcdef1, 7, XRC_SIGNALED), 0);
		xc_get_wc(p.b, p.a, &wc);
		assert_int_equal(wc.wr_id, 61);
		assert_int_equal(wc.op, XRC_OP_RECV);
		assert_int_equal(wc.status, 0);
		assert_int_equal(wc.len, 8);
		assert_memory_equal(rb[1], "rkeyrsp", 8);
		assert_true(wc.has_inv);
		assert_int_equal(wc.inv_rkey, k);
		assert_false(wc.has_imm);
		xc_get_wc(p.b, p.a, &wc);
		assert_int_equal(wc.wr_id, 62);
		assert_int_equal(wc.len, 0);
		assert_true(wc.has_inv);
		assert_int_equal(wc.inv_rkey, mr->rkey);
		xc_get_wc(p.b, p.a, &wc);
		assert_int_equal(wc.wr_id, 63);
		assert_true(wc.has_inv);
		assert_int_equal(wc.inv_rkey, 0x0abcdef1);
		xc_expect_wc(p.a, p.b, 5, XRC_OP_SEND, 0);
		xc_expect_wc(p.a, p.b, 7, XRC_OP_SEND, 0);	/* 6 was unsignaled */
		/* the window is dead, the region's key is not */
		xc_refused(&p, xc_write_st(p.a, p.b, lmr, lbuf, 8, base, k));
		assert_int_equal(xc_write_st(p.a, p.b, lmr, lbuf, 8, base, mr->rkey), 0);
	}
	xrc_win_free(w);
	xc_pair_down(&p);
	xrc_dereg(mr);
	xrc_dereg(rbmr);
	xrc_dereg(lmr);
}

/* Zero-length writes and reads check neither key nor address (IBA C9-88):
 * RTRS's heartbeat is an empty write with immediate, key and address 0,
 * and consumes exactly one receive.  And a write with immediate gathering
 * two pieces of two regions. */
static void test_zero_length_and_gather(void **state)
{
	struct xrc *a, *b;
	static char rb[3][16], mem[256], p1[8] = "0123456", p2[8] = "abcdefg", rd[4];
	struct xrc_mr *rbmr, *m1, *m2, *dst;
	struct xrc_wc wc;
	struct xrc_stats st;

	(void)state;
	xc_begin();
	xc_pair(&a, &b);
	rbmr = xc_reg(b, rb, sizeof(rb), XRC_ACCESS_LOCAL_WRITE);
	dst = xc_reg(b, mem, sizeof(mem), XRC_ACCESS_REMOTE_WRITE);
	m1 = xc_reg(a, p1, sizeof(p1), 0);
	m2 = xc_reg(a, p2, sizeof(p2), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(xrc_post_recv(b, &(struct xrc_sge){ rb[i], 16, rbmr },
					       70 + (uint64_t)i), 0);
	assert_int_equal(xrc_post_write(a, NULL, 0, 0, 0, true, 0x10000001, 1, XRC_SIGNALED), 0);
	xc_get_wc(b, a, &wc);
	assert_int_equal(wc.wr_id, 70);
	assert_int_equal(wc.op, XRC_OP_RECV_IMM);
	assert_int_equal(wc.status, 0);
	assert_int_equal(wc.len, 0);
	assert_true(wc.has_imm);
	assert_int_equal(wc.imm, 0x10000001);
	assert_false(wc.has_inv);
	xc_expect_wc(a, b, 1, XRC_OP_WRITE, 0);
	/* exactly one receive went: the next message takes the second */
	assert_int_equal(xrc_post_send(a, &(struct xrc_sge){ p1, 4, m1 }, 1, 2, 0), 0);
	xc_expect_wc(b, a, 71, XRC_OP_RECV, 0);
	/* without immediate, and a zero-length read, under nonsense keys */
	assert_int_equal(xrc_post_write(a, NULL, 0, 12345, 0xdeadbeef, false, 0, 3, XRC_SIGNALED),
			 0);
	xc_expect_wc(a, b, 3, XRC_OP_WRITE, 0);
	assert_int_equal(xc_read_st(a, b, NULL, rd, 0, 0, 0x0badc0de), 0);
	xrc_get_stats(a, &st);
	assert_int_equal(st.remote_errors, 0);
	xrc_get_stats(b, &st);
	assert_int_equal(st.remote_errors, 0);
	assert_int_equal(xrc_state(a), XRC_UP);
	assert_int_equal(xrc_state(b), XRC_UP);

	/* gather from two regions, with immediate */
	struct xrc_sge g[2] = { { p1, 7, m1 }, { p2, 7, m2 } };
	assert_int_equal(xrc_post_recv(b, &(struct xrc_sge){ rb[2], 16, rbmr }, 72), 0);
	assert_int_equal(xrc_post_write(a, g, 2, (uintptr_t)mem + 10, dst->rkey, true, 99, 4,
					XRC_SIGNALED), 0);
	xc_get_wc(b, a, &wc);
	assert_int_equal(wc.wr_id, 72);
	assert_int_equal(wc.op, XRC_OP_RECV_IMM);
	assert_int_equal(wc.status, 0);
	assert_int_equal(wc.len, 14);
	assert_int_equal(wc.imm, 99);
	assert_memory_equal(mem + 10, "0123456abcdefg", 14);
	xc_expect_wc(a, b, 4, XRC_OP_WRITE, 0);
	xrc_close(a);
	xrc_close(b);
	xrc_dereg(rbmr);
	xrc_dereg(dst);
	xrc_dereg(m1);
	xrc_dereg(m2);
}

/* An RTRS IO connection's depths: the whole send queue (4096 after
 * rounding up) posted at once -- sends and writes, unsignaled but the
 * last -- and 2048 receives. */
static void test_deep_queues(void **state)
{
	enum { SQ = 4096, RQ = 2048 };
	const struct xrc_opts o = { .sq_depth = SQ - 1, .rq_depth = RQ };
	struct xrc *a, *b;
	static char region[RQ * 8], msgs[RQ][8], rbuf[RQ][8];
	struct xrc_mr *rmr, *rbmr, *smr;
	struct xrc_wc wc[64];
	int recvd = 0, sdone = 0;

	(void)state;
	xc_begin();
	xc_pair_opts(&a, &b, &o, &o);
	assert_int_equal(xrc_sq_depth(a), SQ);
	rmr = xc_reg(b, region, sizeof(region), XRC_ACCESS_REMOTE_WRITE);
	rbmr = xc_reg(b, rbuf, sizeof(rbuf), XRC_ACCESS_LOCAL_WRITE);
	smr = xc_reg(a, msgs, sizeof(msgs), 0);
	for (int i = 0; i < RQ; i++)
		assert_int_equal(xrc_post_recv(b, &(struct xrc_sge){ rbuf[i], 8, rbmr }, (uint64_t)i),
				 0);
	assert_int_equal(xrc_post_recv(b, &(struct xrc_sge){ rbuf[0], 8, rbmr }, 0), -ENOBUFS);
	/* sends and writes alternate */
	for (int i = 0; i < SQ; i++) {
		struct xrc_sge s = { msgs[i / 2], 8, smr };
		unsigned fl = i == SQ - 1 ? XRC_SIGNALED : 0;

		memcpy(msgs[i / 2], &i, sizeof(i));
		if (i % 2)
			assert_int_equal(xrc_post_write(a, &s, 1, (uintptr_t)region + (i / 2) * 8,
							rmr->rkey, false, 0, (uint64_t)i, fl), 0);
		else
			assert_int_equal(xrc_post_send(a, &s, 1, (uint64_t)i, fl), 0);
	}
	assert_int_equal(xrc_post_send(a, &(struct xrc_sge){ msgs[0], 8, smr }, 1, 9999, 0),
			 -ENOBUFS);
	for (int round = 0; (recvd < RQ || !sdone) && round < 20000; round++) {
		int n = xrc_poll(b, wc, 64), m;

		assert_true(n >= 0);
		for (int i = 0; i < n; i++) {
			int v;

			assert_int_equal(wc[i].status, 0);
			assert_int_equal(wc[i].wr_id, (uint64_t)recvd);
			memcpy(&v, rbuf[recvd], sizeof(v));
			assert_int_equal(v, recvd * 2);
			recvd++;
		}
		m = xrc_poll(a, wc, 64);
		assert_true(m >= 0);
		for (int i = 0; i < m; i++) {
			assert_int_equal(wc[i].status, 0);
			assert_int_equal(wc[i].wr_id, SQ - 1);
			sdone = 1;
		}
		if (!n && !m)
			xrc_wait(b, XTIME_NS_PER_MS);
	}
	assert_int_equal(recvd, RQ);
	assert_true(sdone);
	for (int i = 1; i < SQ; i += 2) {
		int v;

		memcpy(&v, region + (i / 2) * 8, sizeof(v));
		assert_int_equal(v, i);
	}
	xrc_close(a);
	xrc_close(b);
	xrc_dereg(rmr);
	xrc_dereg(rbmr);
	xrc_dereg(smr);
}

/* The contract, for a test list: the names read the same in every
 * backend's output. */
#define XC_CONTRACT_TESTS					\
	cmocka_unit_test(test_connect_private_data),		\
	cmocka_unit_test(test_reject_with_data),		\
	cmocka_unit_test(test_connect_refused),			\
	cmocka_unit_test(test_send_recv),			\
	cmocka_unit_test(test_post_recvs),			\
	cmocka_unit_test(test_write_read),			\
	cmocka_unit_test(test_remote_access_errors),		\
	cmocka_unit_test(test_recv_too_small),			\
	cmocka_unit_test(test_peer_close_flushes),		\
	cmocka_unit_test(test_many_messages),			\
	cmocka_unit_test(test_window_bind_rebind),		\
	cmocka_unit_test(test_window_binds_then_write),		\
	cmocka_unit_test(test_window_type2),			\
	cmocka_unit_test(test_send_inv),			\
	cmocka_unit_test(test_zero_length_and_gather),		\
	cmocka_unit_test(test_deep_queues),			\
	cmocka_unit_test(test_held_posts)

#endif
