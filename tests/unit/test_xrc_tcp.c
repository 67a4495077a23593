/* The tcp:// reliable-connection backend over loopback: handshake, the verbs
 * operations, the target's key/bounds/access checks, back-pressure, flush,
 * memory windows, send with invalidate, zero-length writes, deep queues. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/xtime.h"
#include "xprt/xrc.h"
#include "xprt/xrc_tcp_wire.h"

#define TMO (10 * XTIME_NS_PER_S)

static struct xuri uri(const char *host, uint16_t port)
{
	struct xuri u = { .scheme = XURI_TCP, .port = port };

	snprintf(u.host, sizeof(u.host), "%s", host);
	return u;
}

struct client {
	struct xuri u;
	struct xrc_opts o;
	const char *priv;
	struct xrc *c;
	char rep[XRC_PRIV_MAX];
	size_t replen;
	int err_no;
	char err[256];
};

static void *client_main(void *arg)
{
	struct client *cl = arg;

	cl->c = xrc_connect(&cl->u, &cl->o, cl->priv, cl->priv ? strlen(cl->priv) : 0, cl->rep,
			    &cl->replen, cl->err, sizeof(cl->err));
	cl->err_no = cl->c ? 0 : errno;
	return NULL;
}

/* The next complete request, waiting on the listener's fd. */
static struct xrc_req *next_req(struct xrc_listener *l)
{
	uint64_t end = xtime_ns() + TMO;
	char err[256];

	while (xtime_ns() < end) {
		struct pollfd p = { xrc_listener_fd(l), POLLIN, 0 };
		struct xrc_req *r = xrc_get_request(l, err, sizeof(err));

		if (r)
			return r;
		assert_int_equal(errno, EAGAIN);
		poll(&p, 1, 100);
	}
	fail_msg("no connect request");
	return NULL;
}

static struct xrc_listener *listen_any(const char *host)
{
	struct xuri u = uri(host, 0);
	char err[256];
	struct xrc_listener *l = xrc_listen(&u, NULL, err, sizeof(err));

	if (!l)
		fail_msg("%s", err);
	return l;
}

/* a: the client end, b: the server end. */
static void pair_opts(struct xrc **a, struct xrc **b, const struct xrc_opts *ao,
		      const struct xrc_opts *bo)
{
	struct xrc_listener *l = listen_any("127.0.0.1");
	struct client cl = { .u = uri("127.0.0.1", xrc_listener_port(l)) };
	pthread_t t;
	char err[256];

	if (ao)
		cl.o = *ao;
	assert_int_equal(pthread_create(&t, NULL, client_main, &cl), 0);
	*b = xrc_accept(next_req(l), NULL, 0, bo, err, sizeof(err));
	pthread_join(t, NULL);
	if (!*b || !cl.c)
		fail_msg("accept: %s / connect: %s", *b ? "ok" : err, cl.err);
	*a = cl.c;
	xrc_listener_close(l);
}

static void pair(struct xrc **a, struct xrc **b) { pair_opts(a, b, NULL, NULL); }

/* One completion from c, driving the peer meanwhile; waits on both fds. */
static void get_wc(struct xrc *c, struct xrc *peer, struct xrc_wc *wc)
{
	uint64_t end = xtime_ns() + TMO;

	while (xtime_ns() < end) {
		struct pollfd p[2] = { { xrc_fd(c), POLLIN, 0 }, { xrc_fd(peer), POLLIN, 0 } };

		if (xrc_poll(c, wc, 1) == 1)
			return;
		assert_int_equal(xrc_poll(peer, NULL, 0), 0);
		poll(p, 2, 10);
	}
	fail_msg("no completion");
}

static void expect_wc(struct xrc *c, struct xrc *peer, uint64_t wr_id, enum xrc_op op,
		      int status)
{
	struct xrc_wc wc;

	get_wc(c, peer, &wc);
	assert_int_equal(wc.wr_id, wr_id);
	assert_int_equal(wc.op, op);
	assert_int_equal(wc.status, status);
}

/* Depths fitted to what a device allows: each at most max_qp_wr (a power
 * of two below it), the CQ's sq + rq + 1 at most max_cqe, the gather list
 * at most max_sge; a device with room changes nothing. */
static void test_opts_fit(void **state)
{
	struct xrc_opts o = { .sq_depth = 4096, .rq_depth = 2048 };
	uint32_t sge;

	(void)state;
	assert_false(xrc_opts_fit(&o, &(struct xrc_dev_caps){ 1 << 20, 1 << 22, 32 }, &sge));
	assert_int_equal(o.sq_depth, 4096);
	assert_int_equal(o.rq_depth, 2048);
	assert_int_equal(sge, XRC_MAX_SGE);
	/* max_qp_wr 3000: 2048 is the largest power of two */
	assert_true(xrc_opts_fit(&o, &(struct xrc_dev_caps){ 3000, 1 << 22, 32 }, &sge));
	assert_int_equal(o.sq_depth, 2048);
	assert_int_equal(o.rq_depth, 2048);
	/* max_cqe 3000: the larger halves first, until 1 + sq + rq fit */
	o = (struct xrc_opts){ .sq_depth = 4096, .rq_depth = 1024 };
	assert_true(xrc_opts_fit(&o, &(struct xrc_dev_caps){ 1 << 20, 3000, 1 }, &sge));
	assert_int_equal(o.sq_depth, 1024);
	assert_int_equal(o.rq_depth, 1024);
	assert_int_equal(sge, 1);
	/* unknown limits (0) cut nothing */
	o = (struct xrc_opts){ .sq_depth = 64, .rq_depth = 64 };
	assert_false(xrc_opts_fit(&o, &(struct xrc_dev_caps){ 0, 0, 0 }, &sge));
	assert_int_equal(o.sq_depth + o.rq_depth, 128);
	/* a tiny CQ still leaves one of each */
	o = (struct xrc_opts){ .sq_depth = 64, .rq_depth = 64 };
	assert_true(xrc_opts_fit(&o, &(struct xrc_dev_caps){ 1 << 20, 3, 4 }, &sge));
	assert_int_equal(o.sq_depth, 1);
	assert_int_equal(o.rq_depth, 1);
}

static void test_connect_private_data(void **state)
{
	struct xrc_listener *l = listen_any("127.0.0.1");
	struct client cl = { .u = uri("127.0.0.1", xrc_listener_port(l)), .priv = "hello-server",
			     .o = { .max_send = 32768 } };
	struct xrc_req *r;
	struct xrc *s;
	const void *d;
	size_t n;
	pthread_t t;
	char err[256];

	(void)state;
	assert_int_equal(pthread_create(&t, NULL, client_main, &cl), 0);
	r = next_req(l);
	d = xrc_req_data(r, &n);
	assert_int_equal(n, 12);
	assert_memory_equal(d, "hello-server", 12);
	assert_true(strncmp(xrc_req_peer(r), "127.0.0.1:", 10) == 0);
	s = xrc_accept(r, "welcome", 7, NULL, err, sizeof(err));
	pthread_join(t, NULL);
	assert_non_null(s);
	if (!cl.c)
		fail_msg("%s", cl.err);
	assert_int_equal(cl.replen, 7);
	assert_memory_equal(cl.rep, "welcome", 7);
	assert_int_equal(xrc_state(cl.c), XRC_UP);
	assert_int_equal(xrc_state(s), XRC_UP);
	assert_int_equal(xrc_scheme(s), XURI_TCP);
	/* max_send is the smaller of the two ends */
	assert_int_equal(xrc_max_send(cl.c), 32768);
	assert_int_equal(xrc_max_send(s), 32768);
	assert_int_equal(xrc_sq_depth(s), 128);
	assert_true(strncmp(xrc_peer(s), "127.0.0.1:", 10) == 0);
	assert_ptr_equal(xrc_domain(s), xrc_domain(cl.c));
	xrc_close(cl.c);
	xrc_close(s);
	xrc_listener_close(l);
}

static void test_reject_with_data(void **state)
{
	struct xrc_listener *l = listen_any("127.0.0.1");
	struct client cl = { .u = uri("127.0.0.1", xrc_listener_port(l)), .priv = "let-me-in" };
	char want[128];
	pthread_t t;

	(void)state;
	assert_int_equal(pthread_create(&t, NULL, client_main, &cl), 0);
	xrc_reject(next_req(l), "go-away", 7);
	pthread_join(t, NULL);
	assert_null(cl.c);
	assert_int_equal(cl.err_no, ECONNREFUSED);
	snprintf(want, sizeof(want), "tcp://127.0.0.1:%u: rejected by peer", cl.u.port);
	assert_string_equal(cl.err, want);
	assert_int_equal(cl.replen, 7);
	assert_memory_equal(cl.rep, "go-away", 7);
	xrc_listener_close(l);
}

static uint16_t bound_port(int fd)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);

	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	return ntohs(sa.sin_port);
}

static void test_connect_errors(void **state)
{
	struct xrc_opts o = { .timeout_ns = 300 * XTIME_NS_PER_MS };
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct xuri u = uri("127.0.0.1", bound_port(fd));	/* bound, not listening */
	char err[256], want[128];
	uint64_t t0;

	(void)state;
	assert_null(xrc_connect(&u, &o, NULL, 0, NULL, NULL, err, sizeof(err)));
	assert_int_equal(errno, ECONNREFUSED);
	snprintf(want, sizeof(want), "tcp://127.0.0.1:%u: connection refused", u.port);
	assert_string_equal(err, want);

	/* listening, but nobody answers the CONN_REQ */
	assert_int_equal(listen(fd, 4), 0);
	t0 = xtime_ns();
	assert_null(xrc_connect(&u, &o, NULL, 0, NULL, NULL, err, sizeof(err)));
	assert_int_equal(errno, ETIMEDOUT);
	snprintf(want, sizeof(want), "tcp://127.0.0.1:%u: timed out", u.port);
	assert_string_equal(err, want);
	assert_true(xtime_ns() - t0 >= 300 * XTIME_NS_PER_MS);
	assert_true(xtime_ns() - t0 < 3 * XTIME_NS_PER_S);
	close(fd);

	u = uri("no-such-host.invalid", 1);
	assert_null(xrc_connect(&u, &o, NULL, 0, NULL, NULL, err, sizeof(err)));
	assert_true(strncmp(err, "tcp://no-such-host.invalid:1: cannot resolve", 44) == 0);
}

static void test_send_recv_sge_inline_imm(void **state)
{
	struct xrc *a, *b;
	char r[3][64], m1[] = "abc", m2[] = "defgh", m3[] = "ij", small[] = "inline!";
	struct xrc_sge sg[3] = { { m1, 3, NULL }, { m2, 5, NULL }, { m3, 2, NULL } };
	struct xrc_sge in = { small, 7, NULL };
	struct xrc_wc wc;

	(void)state;
	pair(&a, &b);
	for (int i = 0; i < 3; i++) {
		struct xrc_sge rs = { r[i], sizeof(r[i]), NULL };
		assert_int_equal(xrc_post_recv(b, &rs, 100 + i), 0);
	}
	assert_int_equal(xrc_post_send(a, sg, 3, 1, XRC_SIGNALED), 0);
	assert_int_equal(xrc_post_send(a, &in, 1, 2, XRC_SIGNALED | XRC_INLINE), 0);
	memcpy(small, "CHANGED", 7);	/* inline: copied at post time */
	assert_int_equal(xrc_post_send_imm(a, sg, 1, 0xdeadbeef, 3, XRC_SIGNALED), 0);

	get_wc(b, a, &wc);
	assert_int_equal(wc.wr_id, 100);
	assert_int_equal(wc.op, XRC_OP_RECV);
	assert_int_equal(wc.len, 10);
	assert_false(wc.has_imm);
	assert_memory_equal(r[0], "abcdefghij", 10);
	get_wc(b, a, &wc);
	assert_int_equal(wc.wr_id, 101);
	assert_int_equal(wc.len, 7);
	assert_memory_equal(r[1], "inline!", 7);
	get_wc(b, a, &wc);
	assert_int_equal(wc.wr_id, 102);
	assert_int_equal(wc.len, 3);
	assert_true(wc.has_imm);
	assert_int_equal(wc.imm, 0xdeadbeef);
	for (uint64_t i = 1; i <= 3; i++)
		expect_wc(a, b, i, XRC_OP_SEND, 0);

	/* xrc_send_inline: header and payload joined, both copied at the post */
	char hdr[] = "HDR:", pay[] = "payload", rr[64];
	struct xrc_sge rs = { rr, sizeof(rr), NULL };

	assert_int_equal(xrc_post_recv(b, &rs, 200), 0);
	assert_int_equal(xrc_send_inline(a, hdr, 4, pay, 7, 4, XRC_SIGNALED), 0);
	memcpy(pay, "CHANGED", 7);
	get_wc(b, a, &wc);
	assert_int_equal(wc.wr_id, 200);
	assert_int_equal(wc.len, 11);
	assert_memory_equal(rr, "HDR:payload", 11);
	expect_wc(a, b, 4, XRC_OP_SEND, 0);
	assert_int_equal(xrc_send_inline(a, hdr, 4, NULL, 0, 9, XRC_INLINE), -EINVAL);
	assert_int_equal(xrc_send_inline(a, hdr, 4, NULL, 8, 9, 0), -EINVAL);
	assert_int_equal(xrc_send_inline(a, r, xrc_max_inline(a), hdr, 1, 9, 0), -EINVAL);

	/* limits checked at post time */
	assert_int_equal(xrc_post_send(a, sg, 5, 9, 0), -EINVAL);
	struct xrc_sge big = { r, xrc_max_send(a) + 1, NULL };
	assert_int_equal(xrc_post_send(a, &big, 1, 9, 0), -EMSGSIZE);
	xrc_close(a);
	xrc_close(b);
}

/* xrc_post_recvs: a batch fills receives in order; a full queue takes
 * what fits and says how many. */
static void test_post_recvs(void **state)
{
	struct xrc_opts o = { .rq_depth = 4 };
	struct xrc *a, *b;
	char r[6][16];
	struct xrc_sge sg[6];
	uint64_t id[6];
	struct xrc_wc wc;

	(void)state;
	pair_opts(&a, &b, NULL, &o);
	for (int i = 0; i < 6; i++) {
		sg[i] = (struct xrc_sge){ r[i], sizeof(r[i]), NULL };
		id[i] = 500 + i;
	}
	assert_int_equal(xrc_post_recvs(b, sg, id, 0), 0);
	assert_int_equal(xrc_post_recvs(b, NULL, id, 2), -EINVAL);
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

		get_wc(b, a, &wc);
		assert_int_equal(wc.op, XRC_OP_RECV);
		assert_int_equal(wc.wr_id, 500 + i);
		snprintf(m, sizeof(m), "m%d", i);
		assert_string_equal(r[i], m);
	}
	for (uint64_t i = 0; i < 4; i++)
		expect_wc(a, b, i, XRC_OP_SEND, 0);
	xrc_close(a);
	xrc_close(b);
}

static void test_write_read(void **state)
{
	struct xrc *a, *b;
	char err[256], dst[4096] = { 0 }, rbuf[64], src[] = "0123456789";
	struct xrc_mr *mr;
	struct xrc_sge s = { src, 10, NULL }, rs = { rbuf, sizeof(rbuf), NULL };
	struct xrc_wc wc;
	uint64_t base;

	(void)state;
	pair(&a, &b);
	mr = xrc_reg(xrc_domain(b), dst, sizeof(dst),
		     XRC_ACCESS_LOCAL_WRITE | XRC_ACCESS_REMOTE_WRITE | XRC_ACCESS_REMOTE_READ,
		     err, sizeof(err));
	assert_non_null(mr);
	base = (uintptr_t)mr->addr;

	assert_int_equal(xrc_post_write(a, &s, 1, base + 100, mr->rkey, false, 0, 1,
					XRC_SIGNALED), 0);
	expect_wc(a, b, 1, XRC_OP_WRITE, 0);
	assert_memory_equal(dst + 100, "0123456789", 10);

	/* with imm: consumes a posted receive, which gets len and imm */
	assert_int_equal(xrc_post_recv(b, &rs, 50), 0);
	assert_int_equal(xrc_post_write(a, &s, 1, base + 4086, mr->rkey, true, 77, 2,
					XRC_SIGNALED), 0);
	get_wc(b, a, &wc);
	assert_int_equal(wc.wr_id, 50);
	assert_int_equal(wc.op, XRC_OP_RECV_IMM);
	assert_int_equal(wc.status, 0);
	assert_int_equal(wc.len, 10);
	assert_true(wc.has_imm);
	assert_int_equal(wc.imm, 77);
	assert_memory_equal(dst + 4086, "0123456789", 10);
	expect_wc(a, b, 2, XRC_OP_WRITE, 0);

	/* read it back into two sges */
	char r1[4] = { 0 }, r2[6] = { 0 };
	struct xrc_sge rsg[2] = { { r1, 4, NULL }, { r2, 6, NULL } };
	assert_int_equal(xrc_post_read(a, rsg, 2, base + 100, mr->rkey, 3, XRC_SIGNALED), 0);
	expect_wc(a, b, 3, XRC_OP_READ, 0);
	assert_memory_equal(r1, "0123", 4);
	assert_memory_equal(r2, "456789", 6);

	/* a large write and read (payload straight into the destination) */
	size_t big = 4u << 20;
	uint8_t *tb = malloc(big), *sb = malloc(big), *rb = malloc(big);
	for (size_t i = 0; i < big; i++)
		sb[i] = (uint8_t)(i * 7 + 3);
	struct xrc_mr *mr2 = xrc_reg(xrc_domain(b), tb, big, XRC_ACCESS_REMOTE_WRITE |
				     XRC_ACCESS_REMOTE_READ, err, sizeof(err));
	struct xrc_sge bs = { sb, (uint32_t)big, NULL }, br = { rb, (uint32_t)big, NULL };
	assert_int_equal(xrc_post_write(a, &bs, 1, (uintptr_t)tb, mr2->rkey, false, 0, 4, 0), 0);
	assert_int_equal(xrc_post_read(a, &br, 1, (uintptr_t)tb, mr2->rkey, 5,
				       XRC_SIGNALED | XRC_FENCE), 0);
	expect_wc(a, b, 5, XRC_OP_READ, 0);	/* 4 was unsignaled */
	assert_memory_equal(tb, sb, big);
	assert_memory_equal(rb, sb, big);

	struct xrc_stats st;
	xrc_get_stats(a, &st);
	assert_int_equal(st.writes, 3);
	assert_int_equal(st.reads, 2);
	assert_int_equal(st.remote_errors, 0);
	xrc_dereg(mr2);
	free(tb);
	free(sb);
	free(rb);
	xrc_dereg(mr);
	xrc_close(a);
	xrc_close(b);
}

static void test_remote_access_errors(void **state)
{
	struct xrc *a, *b;
	char err[256], ro[256], wo[256], canary[256], src[32] = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
	char rbuf[32], recvb[32];
	struct xrc_mr *mro, *mwo, *gone;
	struct xrc_sge s = { src, 32, NULL }, r = { rbuf, 32, NULL };
	struct xrc_sge rv = { recvb, sizeof(recvb), NULL };
	struct xrc_stats st;
	uint64_t rob, wob;
	uint32_t stale;

	(void)state;
	pair(&a, &b);
	memset(ro, 'r', sizeof(ro));
	memset(wo, 'w', sizeof(wo));
	memset(canary, 'r', sizeof(canary));
	mro = xrc_reg(xrc_domain(b), ro, sizeof(ro), XRC_ACCESS_REMOTE_READ, err, sizeof(err));
	mwo = xrc_reg(xrc_domain(b), wo, sizeof(wo), XRC_ACCESS_REMOTE_WRITE, err, sizeof(err));
	gone = xrc_reg(xrc_domain(b), canary, 16, XRC_ACCESS_REMOTE_WRITE, err, sizeof(err));
	assert_non_null(mro);
	assert_non_null(mwo);
	assert_non_null(gone);
	stale = gone->rkey;
	xrc_dereg(gone);
	rob = (uintptr_t)ro;
	wob = (uintptr_t)wo;

	/* write without REMOTE_WRITE; past the end; before the start; wrapping
	 * around; a deregistered key; an invented key -- unsignaled ones too */
	assert_int_equal(xrc_post_write(a, &s, 1, rob, mro->rkey, false, 0, 1, XRC_SIGNALED), 0);
	assert_int_equal(xrc_post_write(a, &s, 1, wob + 240, mwo->rkey, false, 0, 2, 0), 0);
	assert_int_equal(xrc_post_write(a, &s, 1, wob - 1, mwo->rkey, true, 5, 3, XRC_SIGNALED), 0);
	assert_int_equal(xrc_post_write(a, &s, 1, UINT64_MAX - 8, mwo->rkey, false, 0, 4,
					XRC_SIGNALED), 0);
	assert_int_equal(xrc_post_write(a, &s, 1, wob, stale, false, 0, 5, XRC_SIGNALED), 0);
	assert_int_equal(xrc_post_write(a, &s, 1, wob, 0x12345678, false, 0, 6, XRC_SIGNALED), 0);
	/* read without REMOTE_READ; past the end */
	assert_int_equal(xrc_post_read(a, &r, 1, wob, mwo->rkey, 7, XRC_SIGNALED), 0);
	assert_int_equal(xrc_post_read(a, &r, 1, rob + 225, mro->rkey, 8, XRC_SIGNALED), 0);
	for (uint64_t i = 1; i <= 6; i++)
		expect_wc(a, b, i, XRC_OP_WRITE, -EREMOTEIO);
	expect_wc(a, b, 7, XRC_OP_READ, -EREMOTEIO);
	expect_wc(a, b, 8, XRC_OP_READ, -EREMOTEIO);
	assert_memory_equal(ro, canary, sizeof(ro));
	memset(canary, 'w', sizeof(canary));
	assert_memory_equal(wo, canary, sizeof(wo));
	xrc_get_stats(a, &st);
	assert_int_equal(st.remote_errors, 8);
	xrc_get_stats(b, &st);
	assert_int_equal(st.remote_errors, 8);

	/* both ends still usable; the refused write-with-imm took no receive */
	assert_int_equal(xrc_state(a), XRC_UP);
	assert_int_equal(xrc_state(b), XRC_UP);
	assert_int_equal(xrc_post_recv(b, &rv, 9), 0);
	assert_int_equal(xrc_post_write(a, &s, 1, wob + 224, mwo->rkey, false, 0, 10,
					XRC_SIGNALED), 0);
	assert_int_equal(xrc_post_send(a, &s, 1, 11, XRC_SIGNALED), 0);
	expect_wc(a, b, 10, XRC_OP_WRITE, 0);
	expect_wc(a, b, 11, XRC_OP_SEND, 0);
	expect_wc(b, a, 9, XRC_OP_RECV, 0);
	assert_memory_equal(wo + 224, src, 32);
	assert_int_equal(xrc_post_read(a, &r, 1, rob + 224, mro->rkey, 12, XRC_SIGNALED), 0);
	expect_wc(a, b, 12, XRC_OP_READ, 0);
	assert_memory_equal(rbuf, ro + 224, 32);
	xrc_dereg(mro);
	xrc_dereg(mwo);
	xrc_close(a);
	xrc_close(b);
}

static void test_recv_too_small(void **state)
{
	struct xrc *a, *b;
	char small[4], other[64], msg[16] = "0123456789abcde", rb[64];
	struct xrc_sge s = { msg, 16, NULL }, r1 = { small, 4, NULL }, r2 = { other, 64, NULL };
	struct xrc_sge ar = { rb, sizeof(rb), NULL };

	(void)state;
	pair(&a, &b);
	assert_int_equal(xrc_post_recv(a, &ar, 70), 0);
	assert_int_equal(xrc_post_recv(b, &r1, 1), 0);
	assert_int_equal(xrc_post_recv(b, &r2, 2), 0);
	assert_int_equal(xrc_post_send(a, &s, 1, 10, XRC_SIGNALED), 0);
	expect_wc(b, a, 1, XRC_OP_RECV, -EMSGSIZE);
	expect_wc(b, a, 2, XRC_OP_RECV, -ECONNRESET);
	assert_int_equal(xrc_state(b), XRC_DOWN);
	assert_int_equal(xrc_post_recv(b, &r2, 3), -ENOTCONN);
	/* the sender sees the connection fail: its receive is flushed */
	expect_wc(a, b, 10, XRC_OP_SEND, 0);
	expect_wc(a, b, 70, XRC_OP_RECV, -ECONNRESET);
	assert_int_equal(xrc_state(a), XRC_DOWN);
	assert_int_equal(xrc_post_send(a, &s, 1, 11, 0), -ENOTCONN);
	xrc_close(a);
	xrc_close(b);
}

static void test_backpressure(void **state)
{
	enum { N = 512, SZ = 65536 };
	struct xrc_opts o = { .sq_depth = N, .rq_depth = 64 };
	struct xrc *a, *b;
	uint8_t *src = malloc((size_t)N * SZ), *dst = malloc(SZ);
	struct xrc_stats st;
	struct xrc_wc wc[64];
	int sent_done = 0, got = 0, inq = 0;

	(void)state;
	pair_opts(&a, &b, &o, &o);
	for (size_t i = 0; i < (size_t)N * SZ; i++)
		src[i] = (uint8_t)(i / SZ + i);
	for (int i = 0; i < N; i++) {
		struct xrc_sge s = { src + (size_t)i * SZ, SZ, NULL };
		assert_int_equal(xrc_post_send(a, &s, 1, (uint64_t)i, XRC_SIGNALED), 0);
	}
	/* No receive posted: b must not swallow 32 MiB; a's sends stall.
	 * Drive both until a's socket stops taking bytes. */
	for (int round = 0; round < 200; round++) {
		int n = xrc_poll(a, wc, 64);
		assert_true(n >= 0);
		sent_done += n;
		assert_int_equal(xrc_poll(b, wc, 64), 0);
		if (xrc_wait(a, 5 * XTIME_NS_PER_MS) == 0)
			break;
	}
	xrc_get_stats(b, &st);
	assert_int_equal(st.recvs, 0);
	assert_true(sent_done < N);
	assert_int_equal(ioctl(xrc_fd(b), FIONREAD, &inq), 0);
	assert_true(inq > 0);	/* waiting in the kernel, not in our memory */
	assert_int_equal(xrc_wait(b, 0), 0);	/* no POLLIN spin while blocked */

	/* post receives one at a time; every message arrives, in order */
	while (got < N) {
		struct xrc_sge r = { dst, SZ, NULL };
		struct xrc_wc w;

		memset(dst, 0, SZ);
		assert_int_equal(xrc_post_recv(b, &r, (uint64_t)got), 0);
		get_wc(b, a, &w);
		assert_int_equal(w.status, 0);
		assert_int_equal(w.wr_id, (uint64_t)got);
		assert_int_equal(w.len, SZ);
		assert_memory_equal(dst, src + (size_t)got * SZ, SZ);
		got++;
		int n = xrc_poll(a, wc, 64);
		for (int i = 0; i < n; i++)
			assert_int_equal(wc[i].wr_id, (uint64_t)sent_done + i);
		sent_done += n;
	}
	while (sent_done < N) {
		struct xrc_wc w;
		get_wc(a, b, &w);
		assert_int_equal(w.wr_id, (uint64_t)sent_done++);
	}
	free(src);
	free(dst);
	xrc_close(a);
	xrc_close(b);
}

static void test_peer_close_flushes(void **state)
{
	struct xrc *a, *b;
	char err[256], rb[2][64], region[64], rd[64];
	struct xrc_mr *mr;
	struct xrc_wc wc;

	(void)state;
	pair(&a, &b);
	mr = xrc_reg(xrc_domain(b), region, sizeof(region), XRC_ACCESS_REMOTE_READ, err,
		     sizeof(err));
	for (int i = 0; i < 2; i++) {
		struct xrc_sge r = { rb[i], 64, NULL };
		assert_int_equal(xrc_post_recv(a, &r, (uint64_t)i), 0);
	}
	/* b never polls: the read stays unanswered until b goes away */
	struct xrc_sge s = { rd, 64, NULL };
	assert_int_equal(xrc_post_read(a, &s, 1, (uintptr_t)region, mr->rkey, 9, 0), 0);
	xrc_close(b);
	get_wc(a, a, &wc);
	assert_int_equal(wc.wr_id, 9);
	assert_int_equal(wc.op, XRC_OP_READ);
	assert_int_equal(wc.status, -ECONNRESET);	/* unsignaled, but failed */
	get_wc(a, a, &wc);
	assert_int_equal(wc.status, -ECONNRESET);
	assert_int_equal(wc.wr_id, 0);
	get_wc(a, a, &wc);
	assert_int_equal(wc.wr_id, 1);
	assert_int_equal(xrc_state(a), XRC_DOWN);
	assert_int_equal(xrc_post_send(a, &s, 1, 1, 0), -ENOTCONN);
	assert_int_equal(xrc_wait(a, 0), -ENOTCONN);
	xrc_dereg(mr);
	xrc_close(a);
}

static void test_many_messages(void **state)
{
	const char *env = getenv("XPRT_STRESS_MSGS");
	uint32_t total = env ? (uint32_t)strtoul(env, NULL, 10) : 100000;
	enum { DEPTH = 64, MAXLEN = 300 };
	struct xrc_opts o = { .sq_depth = DEPTH, .rq_depth = DEPTH };
	static uint8_t rbuf[DEPTH][MAXLEN], sbuf[DEPTH][MAXLEN];
	uint32_t posted = 0, sent = 0, received = 0;
	struct xrc *a, *b;
	struct xrc_wc wc[DEPTH];

	(void)state;
	pair_opts(&a, &b, &o, &o);
	for (int i = 0; i < DEPTH; i++) {
		struct xrc_sge r = { rbuf[i], MAXLEN, NULL };
		assert_int_equal(xrc_post_recv(b, &r, (uint64_t)i), 0);
	}
	while (received < total) {
		/* keep the send queue full; every 4th is signaled and frees the
		 * ones before it */
		while (posted < total && posted - sent < DEPTH) {
			uint32_t slot = posted % DEPTH, len = 4 + posted % (MAXLEN - 4);
			for (uint32_t k = 0; k < len; k++)
				sbuf[slot][k] = (uint8_t)(posted + k);
			memcpy(sbuf[slot], &posted, 4);
			struct xrc_sge s = { sbuf[slot], len, NULL };
			unsigned fl = (posted % 4 == 3 || posted == total - 1) ? XRC_SIGNALED : 0;
			if (len <= 64 && posted % 2)
				fl |= XRC_INLINE;
			assert_int_equal(xrc_post_send(a, &s, 1, posted, fl), 0);
			posted++;
		}
		int n = xrc_poll(a, wc, DEPTH);
		assert_true(n >= 0);
		for (int i = 0; i < n; i++) {
			assert_int_equal(wc[i].status, 0);
			assert_true(wc[i].wr_id % 4 == 3 || wc[i].wr_id == total - 1);
			sent = (uint32_t)wc[i].wr_id + 1;
		}
		n = xrc_poll(b, wc, DEPTH);
		for (int i = 0; i < n; i++) {
			uint32_t seq, slot = (uint32_t)wc[i].wr_id, len = 4 + received % (MAXLEN - 4);
			assert_int_equal(wc[i].status, 0);
			assert_int_equal(wc[i].len, len);
			memcpy(&seq, rbuf[slot], 4);
			assert_int_equal(seq, received);
			for (uint32_t k = 4; k < len; k++)
				if (rbuf[slot][k] != (uint8_t)(received + k))
					fail_msg("message %u byte %u", received, k);
			struct xrc_sge r = { rbuf[slot], MAXLEN, NULL };
			assert_int_equal(xrc_post_recv(b, &r, slot), 0);
			received++;
		}
		if (!n)
			xrc_wait(b, XTIME_NS_PER_MS);
	}
	xrc_close(a);
	xrc_close(b);
}

static void test_garbage_client(void **state)
{
	struct xrc_listener *l = listen_any("127.0.0.1");
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(xrc_listener_port(l)),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct client cl = { .u = uri("127.0.0.1", xrc_listener_port(l)), .priv = "real" };
	int junk = socket(AF_INET, SOCK_STREAM, 0), silent = socket(AF_INET, SOCK_STREAM, 0);
	uint8_t half[XTCP_HDR_MAX];
	struct xtcp_frame f = { .type = XTCP_CONN_REQ, .len = 4, .max_send = 1, .rq_depth = 1,
				.sq_depth = 1 };
	char err[256], c;
	struct xrc_req *r;
	const void *d;
	size_t n;
	pthread_t t;

	(void)state;
	assert_int_equal(connect(junk, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(connect(silent, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(write(junk, "GET / HTTP/1.0\r\n\r\n", 18), 18);
	/* a client that stops half-way through a valid header */
	xtcp_encode(half, &f);
	assert_int_equal(write(silent, half, 12), 12);
	assert_int_equal(pthread_create(&t, NULL, client_main, &cl), 0);
	r = next_req(l);
	d = xrc_req_data(r, &n);
	assert_int_equal(n, 4);
	assert_memory_equal(d, "real", 4);
	struct xrc *s = xrc_accept(r, NULL, 0, NULL, err, sizeof(err));
	pthread_join(t, NULL);
	assert_non_null(s);
	assert_non_null(cl.c);
	/* the garbage sender was dropped: it reads EOF */
	for (int i = 0; i < 100 && xrc_get_request(l, err, sizeof(err)) == NULL; i++) {
		struct pollfd p = { junk, POLLIN, 0 };
		if (poll(&p, 1, 10) == 1)
			break;
	}
	assert_int_equal(read(junk, &c, 1), 0);
	close(junk);
	close(silent);
	xrc_close(s);
	xrc_close(cl.c);
	xrc_listener_close(l);
}

static void test_ipv6(void **state)
{
	int fd = socket(AF_INET6, SOCK_STREAM, 0);
	struct sockaddr_in6 sa = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	char err[256];

	(void)state;
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (fd >= 0)
			close(fd);
		skip();	/* ::1 is not configured here */
	}
	close(fd);
	struct xuri u = uri("::1", 0);
	struct xrc_listener *l = xrc_listen(&u, NULL, err, sizeof(err));
	assert_non_null(l);
	struct client cl = { .u = uri("::1", xrc_listener_port(l)) };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, client_main, &cl), 0);
	struct xrc_req *r = next_req(l);
	assert_true(strncmp(xrc_req_peer(r), "[::1]:", 6) == 0);
	struct xrc *s = xrc_accept(r, NULL, 0, NULL, err, sizeof(err));
	pthread_join(t, NULL);
	assert_non_null(s);
	assert_non_null(cl.c);
	char buf[8] = { 0 }, six[] = "six";
	struct xrc_sge rs = { buf, 8, NULL }, ss = { six, 3, NULL };
	assert_int_equal(xrc_post_recv(s, &rs, 1), 0);
	assert_int_equal(xrc_post_send(cl.c, &ss, 1, 2, 0), 0);
	expect_wc(s, cl.c, 1, XRC_OP_RECV, 0);
	assert_string_equal(buf, "six");
	xrc_close(s);
	xrc_close(cl.c);
	xrc_listener_close(l);
}

/* A signaled write of len bytes of src to raddr under rkey; its status. */
static int write_st(struct xrc *a, struct xrc *b, void *src, uint32_t len, uint64_t raddr,
		    uint32_t rkey)
{
	struct xrc_sge s = { src, len, NULL };
	struct xrc_wc wc;

	assert_int_equal(xrc_post_write(a, &s, 1, raddr, rkey, false, 0, 4242, XRC_SIGNALED), 0);
	get_wc(a, b, &wc);
	assert_int_equal(wc.wr_id, 4242);
	assert_int_equal(wc.op, XRC_OP_WRITE);
	return wc.status;
}

static int read_st(struct xrc *a, struct xrc *b, void *dst, uint32_t len, uint64_t raddr,
		   uint32_t rkey)
{
	struct xrc_sge s = { dst, len, NULL };
	struct xrc_wc wc;

	assert_int_equal(xrc_post_read(a, &s, 1, raddr, rkey, 4343, XRC_SIGNALED), 0);
	get_wc(a, b, &wc);
	assert_int_equal(wc.wr_id, 4343);
	assert_int_equal(wc.op, XRC_OP_READ);
	return wc.status;
}

static struct xrc_win *win_new(struct xrc *c, unsigned flags)
{
	char err[256];
	struct xrc_win *w = xrc_win_new(xrc_domain(c), flags, err, sizeof(err));

	if (!w)
		fail_msg("window: %s", err);
	return w;
}

/* Rebinding replaces the key: the old one is refused (-EREMOTEIO at the
 * initiator, both ends stay up, memory untouched), the new one works
 * within the window's bounds and access only; invalidate leaves no key. */
static void test_window_bind_rebind(void **state)
{
	enum { RW = XRC_ACCESS_REMOTE_WRITE | XRC_ACCESS_REMOTE_READ };
	struct xrc_opts o = { .sq_depth = 4 };
	struct xrc *a, *b;
	char err[256], mem[8192], src[64], rd[64];
	struct xrc_mr *mr;
	struct xrc_win *w;
	struct xrc_stats st;
	uint32_t k0, k1, k2, k3;
	uintptr_t base = (uintptr_t)mem;

	(void)state;
	pair_opts(&a, &b, NULL, &o);
	memset(mem, '.', sizeof(mem));
	memset(src, 'A', sizeof(src));
	mr = xrc_reg(xrc_domain(b), mem, sizeof(mem), XRC_ACCESS_LOCAL_WRITE, err, sizeof(err));
	assert_non_null(mr);
	w = win_new(b, 0);
	k0 = xrc_win_rkey(w);
	/* never bound: its key grants nothing */
	assert_int_equal(write_st(a, b, src, 8, base, k0), -EREMOTEIO);

	assert_int_equal(xrc_win_bind(b, w, mr, mem + 1024, 1024, RW, 1, XRC_SIGNALED), 0);
	k1 = xrc_win_rkey(w);	/* known as soon as the post returns */
	assert_int_not_equal(k1, k0);
	assert_int_not_equal(k1, mr->rkey);
	expect_wc(b, a, 1, XRC_OP_BIND, 0);
	assert_int_equal(write_st(a, b, src, 64, base + 1024, k1), 0);
	assert_memory_equal(mem + 1024, src, 64);
	assert_int_equal(read_st(a, b, rd, 64, base + 1024, k1), 0);
	assert_memory_equal(rd, src, 64);
	/* the window's bounds, not the region's */
	assert_int_equal(write_st(a, b, src, 8, base + 1020, k1), -EREMOTEIO);
	assert_int_equal(write_st(a, b, src, 8, base + 2044, k1), -EREMOTEIO);
	assert_int_equal(mem[1019], '.');
	assert_int_equal(mem[2048], '.');
	/* the region's own key has no remote access */
	assert_int_equal(write_st(a, b, src, 8, base, mr->rkey), -EREMOTEIO);

	/* rebind, unsignaled, over another range with write access only */
	assert_int_equal(xrc_win_bind(b, w, mr, mem + 4096, 512, XRC_ACCESS_REMOTE_WRITE, 2, 0),
			 0);
	k2 = xrc_win_rkey(w);
	assert_int_not_equal(k2, k1);
	assert_int_equal(write_st(a, b, src, 8, base + 1024, k1), -EREMOTEIO);
	assert_int_equal(write_st(a, b, src, 8, base + 4096 + 504, k2), 0);
	assert_int_equal(read_st(a, b, rd, 8, base + 4096, k2), -EREMOTEIO);	/* no READ */
	assert_int_equal(xrc_state(a), XRC_UP);
	assert_int_equal(xrc_state(b), XRC_UP);

	/* invalidate: no key of it is valid, and it can be bound again */
	assert_int_equal(xrc_win_invalidate(b, w, 3, XRC_SIGNALED), 0);
	expect_wc(b, a, 3, XRC_OP_BIND, 0);	/* 2 was unsignaled */
	assert_int_equal(write_st(a, b, src, 8, base + 4096, k2), -EREMOTEIO);
	assert_int_equal(write_st(a, b, src, 8, base + 4096, xrc_win_rkey(w)), -EREMOTEIO);
	assert_int_equal(xrc_win_bind(b, w, mr, mem, 8192, RW, 4, XRC_SIGNALED), 0);
	expect_wc(b, a, 4, XRC_OP_BIND, 0);
	k3 = xrc_win_rkey(w);
	assert_int_equal(write_st(a, b, src, 8, base + 8184, k3), 0);

	/* binds take send-queue slots, freed when polled */
	for (int i = 0; i < 4; i++)
		assert_int_equal(xrc_win_bind(b, w, mr, mem, 64, RW, 10 + i,
					      i == 3 ? XRC_SIGNALED : 0), 0);
	assert_int_equal(xrc_win_bind(b, w, mr, mem, 64, RW, 14, 0), -ENOBUFS);
	expect_wc(b, a, 13, XRC_OP_BIND, 0);
	assert_int_equal(xrc_win_bind(b, w, mr, mem, 64, RW, 15, 0), 0);

	/* refused at post time: empty, outside the region, local rights,
	 * inline, no region */
	assert_int_equal(xrc_win_bind(b, w, mr, mem, 0, RW, 9, 0), -EINVAL);
	assert_int_equal(xrc_win_bind(b, w, mr, mem + 8000, 256, RW, 9, 0), -EINVAL);
	assert_int_equal(xrc_win_bind(b, w, mr, (void *)(base - 1), 16, RW, 9, 0), -EINVAL);
	assert_int_equal(xrc_win_bind(b, w, mr, mem, 16, XRC_ACCESS_LOCAL_WRITE, 9, 0), -EINVAL);
	assert_int_equal(xrc_win_bind(b, w, mr, mem, 16, RW, 9, XRC_INLINE), -EINVAL);
	assert_int_equal(xrc_win_bind(b, w, NULL, mem, 16, RW, 9, 0), -EINVAL);

	/* deregistering the region kills the window over it */
	k3 = xrc_win_rkey(w);
	assert_int_equal(write_st(a, b, src, 8, base, k3), 0);
	xrc_dereg(mr);
	assert_int_equal(write_st(a, b, src, 8, base, k3), -EREMOTEIO);
	xrc_get_stats(a, &st);
	assert_int_equal(st.remote_errors, 9);
	xrc_win_free(w);
	xrc_win_free(NULL);
	xrc_close(a);
	xrc_close(b);
}

/* Binds on an otherwise idle send queue, more of them than it has slots,
 * each polled: the WRITE after them goes out once (a framing cursor left
 * behind the binds framed the same WRITE again on every lap of the ring,
 * and the peer failed the connection on the repeated sequence number). */
static void test_window_binds_then_write(void **state)
{
	enum { RW = XRC_ACCESS_REMOTE_WRITE | XRC_ACCESS_REMOTE_READ };
	struct xrc_opts o = { .sq_depth = 4 };
	struct xrc *a, *b;
	char err[256], mem[256], buf[64];
	struct xrc_sge rs = { buf, sizeof(buf), NULL }, s = { NULL, 0, NULL };
	struct xrc_mr *mr;
	struct xrc_win *w;
	struct xrc_wc wc;

	(void)state;
	pair_opts(&a, &b, NULL, &o);
	mr = xrc_reg(xrc_domain(b), mem, sizeof(mem), XRC_ACCESS_LOCAL_WRITE, err, sizeof(err));
	assert_non_null(mr);
	w = win_new(b, 0);
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 11; i++) {
			assert_int_equal(xrc_win_bind(b, w, mr, mem, sizeof(mem), RW, 100 + i,
						      XRC_SIGNALED), 0);
			expect_wc(b, a, 100 + i, XRC_OP_BIND, 0);
		}
		for (int i = 0; i < 2; i++)
			assert_int_equal(xrc_post_recv(a, &rs, 7 + i), 0);
		/* a zero-length write with immediate, as a heartbeat */
		assert_int_equal(xrc_post_write(b, &s, 0, 0, 0, true, 0x90000000u + round, 55,
						XRC_SIGNALED), 0);
		get_wc(a, b, &wc);
		assert_int_equal(wc.op, XRC_OP_RECV_IMM);
		assert_int_equal(wc.imm, 0x90000000u + round);
		expect_wc(b, a, 55, XRC_OP_WRITE, 0);
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
	xrc_dereg(mr);
	xrc_close(a);
	xrc_close(b);
}

/* A type-1 window's key works on every connection of the domain -- also
 * after the connection it was bound through is gone; a type-2 window's
 * only on its own, where the peer may invalidate it. */
static void test_window_shared_and_type2(void **state)
{
	enum { RW = XRC_ACCESS_REMOTE_WRITE | XRC_ACCESS_REMOTE_READ };
	struct xrc *a1, *b1, *a2, *b2;
	char err[256], mem[4096], src[32], rb[2][32];
	struct xrc_mr *mr;
	struct xrc_win *w1, *w2;
	struct xrc_wc wc;
	uintptr_t base = (uintptr_t)mem;
	uint32_t k2;

	(void)state;
	pair(&a1, &b1);
	pair(&a2, &b2);
	memset(src, 'S', sizeof(src));
	mr = xrc_reg(xrc_domain(b1), mem, sizeof(mem), 0, err, sizeof(err));
	assert_non_null(mr);
	w1 = win_new(b1, 0);
	w2 = win_new(b1, XRC_WIN_TYPE2);
	assert_int_equal(xrc_win_bind(b1, w1, mr, mem, 1024, RW, 1, 0), 0);
	assert_int_equal(xrc_win_bind(b1, w2, mr, mem + 2048, 1024, RW, 2, 0), 0);
	k2 = xrc_win_rkey(w2);

	assert_int_equal(write_st(a1, b1, src, 32, base, xrc_win_rkey(w1)), 0);
	assert_int_equal(write_st(a2, b2, src, 32, base + 100, xrc_win_rkey(w1)), 0);
	assert_memory_equal(mem + 100, src, 32);
	assert_int_equal(write_st(a1, b1, src, 32, base + 2048, k2), 0);
	assert_int_equal(write_st(a2, b2, src, 32, base + 2048, k2), -EREMOTEIO);
	/* a valid type-2 window must be invalidated before it is bound again */
	assert_int_equal(xrc_win_bind(b1, w2, mr, mem + 2048, 64, RW, 3, 0), -EBUSY);

	/* the peer invalidates it: the receiver sees the key, the window dies
	 * and may be bound again */
	struct xrc_sge r = { rb[0], 32, NULL };
	assert_int_equal(xrc_post_recv(b1, &r, 50), 0);
	assert_int_equal(xrc_post_send_inv(a1, NULL, 0, k2, 5, XRC_SIGNALED), 0);
	get_wc(b1, a1, &wc);
	assert_int_equal(wc.wr_id, 50);
	assert_int_equal(wc.op, XRC_OP_RECV);
	assert_int_equal(wc.status, 0);
	assert_int_equal(wc.len, 0);
	assert_true(wc.has_inv);
	assert_int_equal(wc.inv_rkey, k2);
	assert_false(wc.has_imm);
	expect_wc(a1, b1, 5, XRC_OP_SEND, 0);
	assert_int_equal(write_st(a1, b1, src, 32, base + 2048, k2), -EREMOTEIO);
	assert_int_equal(xrc_win_bind(b1, w2, mr, mem + 2048, 64, RW, 3, 0), 0);
	assert_int_not_equal(xrc_win_rkey(w2), k2);
	assert_int_equal(write_st(a1, b1, src, 32, base + 2048, xrc_win_rkey(w2)), 0);

	/* the connection it was bound through goes: the type-1 key lives on,
	 * the type-2 window dies with it and can only be freed */
	xrc_close(a1);
	xrc_close(b1);
	assert_int_equal(write_st(a2, b2, src, 32, base + 200, xrc_win_rkey(w1)), 0);
	assert_memory_equal(mem + 200, src, 32);
	assert_int_equal(xrc_win_bind(b2, w2, mr, mem + 2048, 64, RW, 3, 0), -EBUSY);
	/* and a type-1 window rebinds through any connection */
	assert_int_equal(xrc_win_bind(b2, w1, mr, mem + 512, 64, RW, 4, 0), 0);
	assert_int_equal(write_st(a2, b2, src, 32, base + 512, xrc_win_rkey(w1)), 0);
	xrc_win_free(w1);
	xrc_win_free(w2);
	xrc_dereg(mr);
	xrc_close(a2);
	xrc_close(b2);
}

/* Send with invalidate: reported with the key; a window valid for the
 * connection (type 1 too) is invalidated, any other key only reported;
 * the connection carries on.  Send with an 8-byte immediate message (an
 * RTRS rkey_rsp) arrives as RECV with has_imm. */
static void test_send_inv(void **state)
{
	enum { RW = XRC_ACCESS_REMOTE_WRITE };
	struct xrc *a, *b;
	char err[256], mem[1024], src[8] = "rkeyrsp", rb[4][16];
	struct xrc_mr *mr;
	struct xrc_win *w;
	struct xrc_wc wc;
	uintptr_t base = (uintptr_t)mem;
	uint32_t k;

	(void)state;
	pair(&a, &b);
	mr = xrc_reg(xrc_domain(b), mem, sizeof(mem), RW, err, sizeof(err));
	assert_non_null(mr);
	w = win_new(b, 0);
	assert_int_equal(xrc_win_bind(b, w, mr, mem, 256, RW, 1, 0), 0);
	k = xrc_win_rkey(w);
	for (int i = 0; i < 4; i++) {
		struct xrc_sge r = { rb[i], 16, NULL };
		assert_int_equal(xrc_post_recv(b, &r, 60 + (uint64_t)i), 0);
	}
	struct xrc_sge s8 = { src, 8, NULL };
	assert_int_equal(xrc_post_send_inv(a, &s8, 1, k, 1, 0), 0);
	assert_int_equal(xrc_post_send_inv(a, NULL, 0, mr->rkey, 2, 0), 0);
	assert_int_equal(xrc_post_send_inv(a, NULL, 0, 0x0abcdef1, 3, 0), 0);
	assert_int_equal(xrc_post_send_imm(a, &s8, 1, 0x20000007, 4, XRC_SIGNALED), 0);
	get_wc(b, a, &wc);
	assert_int_equal(wc.wr_id, 60);
	assert_int_equal(wc.len, 8);
	assert_memory_equal(rb[0], "rkeyrsp", 8);
	assert_true(wc.has_inv);
	assert_int_equal(wc.inv_rkey, k);
	get_wc(b, a, &wc);
	assert_true(wc.has_inv);
	assert_int_equal(wc.inv_rkey, mr->rkey);
	get_wc(b, a, &wc);
	assert_true(wc.has_inv);
	assert_int_equal(wc.inv_rkey, 0x0abcdef1);
	get_wc(b, a, &wc);
	assert_int_equal(wc.wr_id, 63);
	assert_int_equal(wc.op, XRC_OP_RECV);
	assert_int_equal(wc.status, 0);
	assert_int_equal(wc.len, 8);
	assert_true(wc.has_imm);
	assert_int_equal(wc.imm, 0x20000007);
	assert_false(wc.has_inv);
	expect_wc(a, b, 4, XRC_OP_SEND, 0);
	/* the window is dead, the region's key is not */
	assert_int_equal(write_st(a, b, src, 8, base, k), -EREMOTEIO);
	assert_int_equal(write_st(a, b, src, 8, base, mr->rkey), 0);
	assert_int_equal(xrc_state(a), XRC_UP);
	assert_int_equal(xrc_state(b), XRC_UP);
	xrc_win_free(w);
	xrc_dereg(mr);
	xrc_close(a);
	xrc_close(b);
}

/* RTRS's heartbeat: a zero-length write with immediate, rkey and address 0.
 * No key check, one receive consumed.  And a write with immediate
 * gathering two pieces of two regions. */
static void test_zero_length_and_gather(void **state)
{
	struct xrc *a, *b;
	char err[256], rb[2][16], mem[256], p1[8] = "0123456", p2[8] = "abcdefg", rd[4];
	struct xrc_mr *m1, *m2, *dst;
	struct xrc_wc wc;
	struct xrc_stats st;

	(void)state;
	pair(&a, &b);
	for (int i = 0; i < 2; i++) {
		struct xrc_sge r = { rb[i], 16, NULL };
		assert_int_equal(xrc_post_recv(b, &r, 70 + (uint64_t)i), 0);
	}
	assert_int_equal(xrc_post_write(a, NULL, 0, 0, 0, true, 0x10000001, 1, XRC_SIGNALED), 0);
	get_wc(b, a, &wc);
	assert_int_equal(wc.wr_id, 70);
	assert_int_equal(wc.op, XRC_OP_RECV_IMM);
	assert_int_equal(wc.status, 0);
	assert_int_equal(wc.len, 0);
	assert_true(wc.has_imm);
	assert_int_equal(wc.imm, 0x10000001);
	expect_wc(a, b, 1, XRC_OP_WRITE, 0);
	/* exactly one receive went: the next message takes the second */
	struct xrc_sge s = { p1, 4, NULL };
	assert_int_equal(xrc_post_send(a, &s, 1, 2, 0), 0);
	expect_wc(b, a, 71, XRC_OP_RECV, 0);
	/* without imm, and a zero-length read, under nonsense keys */
	assert_int_equal(xrc_post_write(a, NULL, 0, 12345, 0xdeadbeef, false, 0, 3,
					XRC_SIGNALED), 0);
	expect_wc(a, b, 3, XRC_OP_WRITE, 0);
	assert_int_equal(read_st(a, b, rd, 0, 0, 0x0badc0de), 0);
	xrc_get_stats(b, &st);
	assert_int_equal(st.remote_errors, 0);

	/* gather from two regions, with immediate */
	m1 = xrc_reg(xrc_domain(a), p1, sizeof(p1), 0, err, sizeof(err));
	m2 = xrc_reg(xrc_domain(a), p2, sizeof(p2), 0, err, sizeof(err));
	dst = xrc_reg(xrc_domain(b), mem, sizeof(mem), XRC_ACCESS_REMOTE_WRITE, err, sizeof(err));
	struct xrc_sge g[2] = { { p1, 7, m1 }, { p2, 7, m2 } };
	struct xrc_sge r = { rb[0], 16, NULL };
	assert_int_equal(xrc_post_recv(b, &r, 72), 0);
	assert_int_equal(xrc_post_write(a, g, 2, (uintptr_t)mem + 10, dst->rkey, true, 99, 4,
					XRC_SIGNALED), 0);
	get_wc(b, a, &wc);
	assert_int_equal(wc.wr_id, 72);
	assert_int_equal(wc.op, XRC_OP_RECV_IMM);
	assert_int_equal(wc.len, 14);
	assert_int_equal(wc.imm, 99);
	assert_memory_equal(mem + 10, "0123456abcdefg", 14);
	expect_wc(a, b, 4, XRC_OP_WRITE, 0);
	xrc_dereg(m1);
	xrc_dereg(m2);
	xrc_dereg(dst);
	xrc_close(a);
	xrc_close(b);
}

/* RTRS IO connections: queue_depth*4+1 sends (sq_depth 4096 after
 * rounding for queue_depth 512... 1023) and 2048 receives. */
static void test_deep_queues(void **state)
{
	enum { SQ = 4096, RQ = 2048 };
	struct xrc_opts o = { .sq_depth = SQ - 1, .rq_depth = RQ };
	struct xrc *a, *b;
	char err[256];
	static char region[RQ * 8], msgs[RQ][8], rbuf[RQ][8];
	struct xrc_mr *mr;
	struct xrc_wc wc[64];
	int recvd = 0, sdone = 0;

	(void)state;
	pair_opts(&a, &b, &o, &o);
	assert_int_equal(xrc_sq_depth(a), SQ);
	mr = xrc_reg(xrc_domain(b), region, sizeof(region), XRC_ACCESS_REMOTE_WRITE, err,
		     sizeof(err));
	assert_non_null(mr);
	for (int i = 0; i < RQ; i++) {
		struct xrc_sge r = { rbuf[i], 8, NULL };
		assert_int_equal(xrc_post_recv(b, &r, (uint64_t)i), 0);
	}
	struct xrc_sge r = { rbuf[0], 8, NULL };
	assert_int_equal(xrc_post_recv(b, &r, 0), -ENOBUFS);
	/* the whole send queue at once: sends and writes alternate */
	for (int i = 0; i < SQ; i++) {
		struct xrc_sge s = { msgs[i / 2], 8, NULL };
		unsigned fl = i == SQ - 1 ? XRC_SIGNALED : 0;

		memcpy(msgs[i / 2], &i, sizeof(i));
		if (i % 2)
			assert_int_equal(xrc_post_write(a, &s, 1, (uintptr_t)region + (i / 2) * 8,
							mr->rkey, false, 0, (uint64_t)i, fl), 0);
		else
			assert_int_equal(xrc_post_send(a, &s, 1, (uint64_t)i, fl), 0);
	}
	struct xrc_sge s = { msgs[0], 8, NULL };
	assert_int_equal(xrc_post_send(a, &s, 1, 9999, 0), -ENOBUFS);
	while (recvd < RQ || !sdone) {
		int n = xrc_poll(b, wc, 64);

		assert_true(n >= 0);
		for (int i = 0; i < n; i++) {
			int v;

			assert_int_equal(wc[i].status, 0);
			assert_int_equal(wc[i].wr_id, (uint64_t)recvd);
			memcpy(&v, rbuf[recvd], sizeof(v));
			assert_int_equal(v, recvd * 2);
			recvd++;
		}
		n = xrc_poll(a, wc, 64);
		assert_true(n >= 0);
		for (int i = 0; i < n; i++) {
			assert_int_equal(wc[i].status, 0);
			assert_int_equal(wc[i].wr_id, SQ - 1);
			sdone = 1;
		}
		if (!n)
			xrc_wait(a, XTIME_NS_PER_MS);
	}
	for (int i = 1; i < SQ; i += 2) {
		int v;

		memcpy(&v, region + (i / 2) * 8, sizeof(v));
		assert_int_equal(v, i);
	}
	xrc_dereg(mr);
	xrc_close(a);
	xrc_close(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_opts_fit),
		cmocka_unit_test(test_connect_private_data),
		cmocka_unit_test(test_reject_with_data),
		cmocka_unit_test(test_connect_errors),
		cmocka_unit_test(test_send_recv_sge_inline_imm),
		cmocka_unit_test(test_post_recvs),
		cmocka_unit_test(test_write_read),
		cmocka_unit_test(test_remote_access_errors),
		cmocka_unit_test(test_recv_too_small),
		cmocka_unit_test(test_backpressure),
		cmocka_unit_test(test_peer_close_flushes),
		cmocka_unit_test(test_many_messages),
		cmocka_unit_test(test_garbage_client),
		cmocka_unit_test(test_ipv6),
		cmocka_unit_test(test_window_bind_rebind),
		cmocka_unit_test(test_window_binds_then_write),
		cmocka_unit_test(test_window_shared_and_type2),
		cmocka_unit_test(test_send_inv),
		cmocka_unit_test(test_zero_length_and_gather),
		cmocka_unit_test(test_deep_queues),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
