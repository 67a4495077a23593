/* The tcp:// reliable-connection backend over loopback: the contract every
 * backend must honour (xrc_contract.h), then what only tcp has -- fitting
 * options to a device's limits (plain arithmetic, tested here because it
 * needs no device), connect timeouts and name resolution, clients that
 * send garbage or stall, a listener whose table of half-read requests is
 * full, IPv6, and back-pressure through the socket. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/xtime.h"
#include "xprt/xrc.h"
#include "xprt/xrc_tcp_pri.h"
#include "xprt/xrc_tcp_wire.h"
#include "xrc_contract.h"

static struct xuri uri(const char *host, uint16_t port)
{
	struct xuri u = { .scheme = XURI_TCP, .port = port };

	snprintf(u.host, sizeof(u.host), "%s", host);
	return u;
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

static uint16_t bound_port(int fd)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);

	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	return ntohs(sa.sin_port);
}

/* Listening, but nobody answers the CONN_REQ: the connect gives up after
 * its timeout.  A name that does not resolve fails at once. */
static void test_connect_timeout(void **state)
{
	struct xrc_opts o = { .timeout_ns = 300 * XTIME_NS_PER_MS };
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct xuri u = uri("127.0.0.1", bound_port(fd));
	char err[256], want[128];
	uint64_t t0;

	(void)state;
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
	xc_pair_opts(&a, &b, &o, &o);
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
		xc_get_wc(b, a, &w);
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
		xc_get_wc(a, b, &w);
		assert_int_equal(w.wr_id, (uint64_t)sent_done++);
	}
	free(src);
	free(dst);
	xrc_close(a);
	xrc_close(b);
}

/* Readiness hints: once the owner's epoll speaks for the socket, a poll
 * after a read that drained it does not read again (the bytes wait in the
 * kernel) until xrc_ready(); xrc_wait() looks for itself; hints off, every
 * poll reads. */
static void test_ready_hints(void **state)
{
	struct xrc_opts o = { .sq_depth = 8, .rq_depth = 8 };
	struct xrc *a, *b;
	uint8_t src[3][100], dst[3][100];
	struct xrc_wc wc[8], w;
	int inq = 0;

	(void)state;
	xc_pair_opts(&a, &b, &o, &o);
	for (int i = 0; i < 3; i++) {
		memset(src[i], 'a' + i, sizeof(src[i]));
		assert_int_equal(xrc_post_recv(b, &(struct xrc_sge){ dst[i], sizeof(dst[i]), NULL },
					       (uint64_t)i), 0);
	}
	xrc_ready_hints(b, true);
	assert_int_equal(xrc_poll(b, wc, 8), 0);	/* reads once: nothing there */

	assert_int_equal(xrc_post_send(a, &(struct xrc_sge){ src[0], 100, NULL }, 1, 0,
				       XRC_SIGNALED), 0);
	xc_get_wc(a, b, &w);		/* sent: the bytes are in b's socket */
	for (int i = 0; i < 50; i++) {
		assert_int_equal(xrc_poll(b, wc, 8), 0);
		if (ioctl(xrc_fd(b), FIONREAD, &inq) == 0 && inq > 0)
			break;
		usleep(1000);
	}
	assert_true(inq > 0);
	assert_int_equal(xrc_poll(b, wc, 8), 0);	/* not read: nobody said so */
	assert_int_equal(ioctl(xrc_fd(b), FIONREAD, &inq), 0);
	assert_true(inq > 0);
	xrc_ready(b);
	assert_int_equal(xrc_poll(b, wc, 8), 1);
	assert_int_equal(wc[0].wr_id, 0);
	assert_memory_equal(dst[0], src[0], 100);

	/* a blocking wait reads without being told */
	assert_int_equal(xrc_post_send(a, &(struct xrc_sge){ src[1], 100, NULL }, 1, 1,
				       XRC_SIGNALED), 0);
	xc_get_wc(a, b, &w);
	assert_int_equal(xrc_wait(b, 2 * XTIME_NS_PER_S), 1);
	assert_int_equal(xrc_poll(b, wc, 8), 1);
	assert_int_equal(wc[0].wr_id, 1);
	assert_memory_equal(dst[1], src[1], 100);

	/* hints off: a plain poll reads */
	assert_int_equal(xrc_poll(b, wc, 8), 0);
	xrc_ready_hints(b, false);
	assert_int_equal(xrc_post_send(a, &(struct xrc_sge){ src[2], 100, NULL }, 1, 2,
				       XRC_SIGNALED), 0);
	xc_get_wc(a, b, &w);
	for (int i = 0; i < 2000 && xrc_poll(b, wc, 8) == 0; i++)
		usleep(1000);
	assert_int_equal(wc[0].wr_id, 2);
	assert_memory_equal(dst[2], src[2], 100);
	xrc_close(a);
	xrc_close(b);
}

/* a's WRITE completion, driving b meanwhile: how long it took, in ns, or
 * UINT64_MAX when none came within limit_ns. */
static uint64_t write_done_after(struct xrc *a, struct xrc *b, uint64_t limit_ns)
{
	uint64_t t0 = xtime_ns();
	struct xrc_wc wc;

	while (xtime_ns() - t0 < limit_ns) {
		int n = xrc_poll(a, &wc, 1);

		assert_true(n >= 0);
		if (n == 1) {
			assert_int_equal(wc.op, XRC_OP_WRITE);
			assert_int_equal(wc.status, 0);
			return xtime_ns() - t0;
		}
		assert_true(xrc_poll(b, &wc, 1) >= 0);
		usleep(200);
	}
	return UINT64_MAX;
}

/* opts.ack_delay_ns: the target holds the ACK for WRITEs until a frame of
 * its own carries it, a quarter of the writer's send queue is owed, its
 * time comes (xrc_next_timer says when, and the next poll after sends it)
 * or it waits in xrc_wait(); without the option the poll that read the
 * WRITE answers it. */
static void test_ack_delay(void **state)
{
	enum { DELAY_MS = 1000 };
	struct xrc_opts ao = { .sq_depth = 16, .rq_depth = 8 };
	struct xrc_opts bo = { .sq_depth = 16, .rq_depth = 8,
			       .ack_delay_ns = DELAY_MS * XTIME_NS_PER_MS };
	static char region[4096], src[64], rbuf[64];
	struct xrc *a, *b, *a2, *b2;
	struct xrc_mr *rmr, *rmr2;
	struct xrc_wc wc;
	uint64_t t, before;

	(void)state;
	xc_pair_opts(&a, &b, &ao, &bo);
	rmr = xc_reg(b, region, sizeof(region), XRC_ACCESS_REMOTE_WRITE);
	memset(src, 'w', sizeof(src));
	assert_int_equal(xrc_next_timer(b), UINT64_MAX);

	/* held, then carried by b's SEND */
	before = xtime_ns();
	assert_int_equal(xrc_post_write(a, &(struct xrc_sge){ src, 8, NULL }, 1,
					(uintptr_t)region, rmr->rkey, false, 0, 1, XRC_SIGNALED), 0);
	assert_int_equal(write_done_after(a, b, 50 * XTIME_NS_PER_MS), UINT64_MAX);
	assert_memory_equal(region, src, 8);	/* applied, not answered */
	t = xrc_next_timer(b);
	assert_true(t >= before + DELAY_MS * XTIME_NS_PER_MS && t <= xtime_ns() + DELAY_MS * XTIME_NS_PER_MS);
	assert_int_equal(xrc_post_recv(a, &(struct xrc_sge){ rbuf, sizeof(rbuf), NULL }, 9), 0);
	assert_int_equal(xrc_post_send(b, &(struct xrc_sge){ src, 4, NULL }, 1, 2, 0), 0);
	t = write_done_after(a, b, 100 * XTIME_NS_PER_MS);
	assert_true(t < 100 * XTIME_NS_PER_MS);
	assert_int_equal(xrc_next_timer(b), UINT64_MAX);
	xc_get_wc(a, b, &wc);
	assert_int_equal(wc.wr_id, 9);

	/* nothing to ride with: the poll after its time sends it */
	assert_int_equal(xrc_post_write(a, &(struct xrc_sge){ src, 8, NULL }, 1,
					(uintptr_t)region + 8, rmr->rkey, false, 0, 3, XRC_SIGNALED), 0);
	t = write_done_after(a, b, 3 * DELAY_MS * XTIME_NS_PER_MS);
	assert_true(t != UINT64_MAX);
	assert_true(t >= (DELAY_MS - 20) * XTIME_NS_PER_MS);
	assert_int_equal(xrc_next_timer(b), UINT64_MAX);

	/* a quarter of a's send queue (16) owed: at once */
	for (uint64_t i = 0; i < 3; i++)
		assert_int_equal(xrc_post_write(a, &(struct xrc_sge){ src, 8, NULL }, 1,
						(uintptr_t)region + 16 + 8 * i, rmr->rkey, false, 0,
						10 + i, 0), 0);
	assert_int_equal(xrc_post_write(a, &(struct xrc_sge){ src, 8, NULL }, 1,
					(uintptr_t)region + 40, rmr->rkey, false, 0, 13,
					XRC_SIGNALED), 0);
	t = write_done_after(a, b, 100 * XTIME_NS_PER_MS);
	assert_true(t < 100 * XTIME_NS_PER_MS);

	/* a waiter sends what it holds */
	assert_int_equal(xrc_post_write(a, &(struct xrc_sge){ src, 8, NULL }, 1,
					(uintptr_t)region + 48, rmr->rkey, false, 0, 14, XRC_SIGNALED), 0);
	assert_int_equal(write_done_after(a, b, 30 * XTIME_NS_PER_MS), UINT64_MAX);
	assert_true(xrc_next_timer(b) != UINT64_MAX);
	assert_true(xrc_wait(b, XTIME_NS_PER_MS) >= 0);
	assert_int_equal(xrc_next_timer(b), UINT64_MAX);
	t = write_done_after(a, b, 100 * XTIME_NS_PER_MS);
	assert_true(t < 100 * XTIME_NS_PER_MS);
	xrc_close(a);
	xrc_close(b);

	/* without the option: answered by the poll that read it */
	xc_pair_opts(&a2, &b2, &ao, &ao);
	rmr2 = xc_reg(b2, region, sizeof(region), XRC_ACCESS_REMOTE_WRITE);
	assert_int_equal(xrc_post_write(a2, &(struct xrc_sge){ src, 8, NULL }, 1,
					(uintptr_t)region, rmr2->rkey, false, 0, 1, XRC_SIGNALED), 0);
	t = write_done_after(a2, b2, 100 * XTIME_NS_PER_MS);
	assert_true(t < 100 * XTIME_NS_PER_MS);
	assert_int_equal(xrc_next_timer(b2), UINT64_MAX);
	xrc_close(a2);
	xrc_close(b2);
}

/* A stream of frames of every size class back to back -- tiny, mid-size,
 * and bulk ones whose payload is read straight into its destination after
 * a small staging read -- SENDs into receive buffers and WRITEs with
 * immediate into a region, pipelined 8 deep: every byte lands where it
 * belongs.  Random sizes, seed printed. */
static void test_mixed_sizes(void **state)
{
	enum { N = 400, MAXSZ = 300 << 10, DEPTH = 8 };
	struct xrc_opts o = { .sq_depth = 32, .rq_depth = 32, .max_send = MAXSZ };
	const char *env = getenv("XPRT_SEED");
	unsigned seed = env ? (unsigned)strtoul(env, NULL, 0) : (unsigned)xtime_ns();
	uint8_t *src = malloc((size_t)DEPTH * MAXSZ), *dst = malloc((size_t)DEPTH * MAXSZ);
	uint8_t *region = malloc((size_t)DEPTH * MAXSZ);
	size_t len[DEPTH];
	bool wr[DEPTH];
	struct xrc_mr *rmr, *smr;
	struct xrc *a, *b;

	(void)state;
	assert_true(src && dst && region);
	printf("test_mixed_sizes: seed %u (XPRT_SEED to repeat)\n", seed);
	srandom(seed);
	xc_pair_opts(&a, &b, &o, &o);
	rmr = xc_reg(b, region, (size_t)DEPTH * MAXSZ, XRC_ACCESS_REMOTE_WRITE);
	smr = xc_reg(a, src, (size_t)DEPTH * MAXSZ, 0);
	for (int done = 0; done < N; done += DEPTH) {
		for (int i = 0; i < DEPTH; i++) {
			uint8_t *p = src + (size_t)i * MAXSZ;
			long cls = random() % 3;

			len[i] = cls == 0 ? (size_t)(random() % 300) :
				 cls == 1 ? 512 + (size_t)(random() % (32 << 10)) :
				 (32 << 10) + (size_t)(random() % (MAXSZ - (32 << 10)));
			wr[i] = random() % 2;
			for (size_t k = 0; k < len[i]; k++)
				p[k] = (uint8_t)(k * 31 + (size_t)done + (size_t)i);
			assert_int_equal(xrc_post_recv(b, &(struct xrc_sge){ dst + (size_t)i * MAXSZ,
						       MAXSZ, NULL }, (uint64_t)i), 0);
		}
		for (int i = 0; i < DEPTH; i++) {
			struct xrc_sge sg = { src + (size_t)i * MAXSZ, (uint32_t)len[i], smr };

			if (wr[i])
				assert_int_equal(xrc_post_write(a, &sg, 1,
						 (uintptr_t)(region + (size_t)i * MAXSZ), rmr->rkey,
						 true, (uint32_t)i, (uint64_t)i, XRC_SIGNALED), 0);
			else
				assert_int_equal(xrc_post_send(a, &sg, 1, (uint64_t)i, XRC_SIGNALED),
						 0);
		}
		for (int i = 0; i < DEPTH; i++) {
			struct xrc_wc w;
			const uint8_t *got;

			xc_get_wc(b, a, &w);
			assert_int_equal(w.status, 0);
			assert_int_equal(w.wr_id, (uint64_t)i);	/* receives complete in order */
			assert_int_equal(w.len, len[i]);
			got = (wr[i] ? region : dst) + (size_t)i * MAXSZ;
			if (memcmp(got, src + (size_t)i * MAXSZ, len[i]))
				fail_msg("seed %u: message %d (%zu bytes, %s) differs", seed, done + i,
					 len[i], wr[i] ? "write" : "send");
		}
		for (int i = 0; i < DEPTH; i++) {
			struct xrc_wc w;

			xc_get_wc(a, b, &w);
			assert_int_equal(w.status, 0);
		}
	}
	xrc_close(a);
	xrc_close(b);
	xrc_dereg(rmr);
	xrc_dereg(smr);
	free(src);
	free(dst);
	free(region);
}

/* Short writes on demand: the library's send(2) calls come here (the
 * executable's definition wins over libc's), and while short_every is
 * set one in short_every of them hands the kernel only a random prefix,
 * as a socket with little room would take.  Its own generator: how many
 * sends there are depends on timing, the messages must not. */
static unsigned short_every, short_cuts;
static uint64_t short_rng;
static ssize_t (*real_send)(int, const void *, size_t, int);

/* timerfd_settime(2), the listener's pause timer: it fails while
 * settime_fails is set. */
static bool settime_fails;
static int (*real_settime)(int, int, const struct itimerspec *, struct itimerspec *);

/* epoll_ctl(2): while watch_fails is set, that many adds of a listening
 * socket after its first (the listener's own, at listen) fail (ENOSPC:
 * the user's max_user_watches), and the pause timer fails with them
 * until an add succeeds. */
static unsigned watch_fails, watch_failed, watch_adds;
static bool watch_timer_down;
static int (*real_epoll_ctl)(int, int, int, struct epoll_event *);

__attribute__((constructor)) static void find_send(void)
{
	*(void **)&real_send = dlsym(RTLD_NEXT, "send");
	*(void **)&real_settime = dlsym(RTLD_NEXT, "timerfd_settime");
	*(void **)&real_epoll_ctl = dlsym(RTLD_NEXT, "epoll_ctl");
}

int timerfd_settime(int fd, int flags, const struct itimerspec *nv, struct itimerspec *ov)
{
	if (settime_fails || watch_timer_down) {
		errno = EINVAL;
		return -1;
	}
	return real_settime(fd, flags, nv, ov);
}

int epoll_ctl(int efd, int op, int fd, struct epoll_event *ev)
{
	int on = 0;
	socklen_t len = sizeof(on);

	if (watch_failed < watch_fails && op == EPOLL_CTL_ADD &&
	    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len) == 0 && on && watch_adds++) {
		watch_failed++;
		watch_timer_down = true;
		errno = ENOSPC;
		return -1;
	}
	if (op == EPOLL_CTL_ADD)
		watch_timer_down = false;
	return real_epoll_ctl(efd, op, fd, ev);
}

static uint64_t short_next(void)
{
	short_rng ^= short_rng << 13;
	short_rng ^= short_rng >> 7;
	short_rng ^= short_rng << 17;
	return short_rng;
}

ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	if (short_every && len > 1 && short_next() % short_every == 0) {
		len = 1 + (size_t)(short_next() % (len - 1));
		short_cuts++;
	}
	return real_send(fd, buf, len, flags);
}

static int short_off(void **state)
{
	(void)state;
	short_every = 0;
	return 0;
}

/* Small messages sent one at a time, each flushed at once -- until the
 * socket fills, a batch of one message that goes out from one copy by
 * send(2) -- a third of those writes cut short, into a sending socket
 * buffer shrunk so that it fills: every message arrives whole and in
 * order.  Random sizes, seed printed. */
static void test_small_partial(void **state)
{
	enum { N = 256, ROUNDS = 6, MAXSZ = 400 };
	struct xrc_opts o = { .sq_depth = N, .rq_depth = N };
	const char *env = getenv("XPRT_SEED");
	unsigned seed = env ? (unsigned)strtoul(env, NULL, 0) : (unsigned)xtime_ns();
	static uint8_t src[N][MAXSZ], dst[N][MAXSZ];
	int small = 4096;
	size_t len[N];
	struct xrc *a, *b;

	(void)state;
	printf("test_small_partial: seed %u (XPRT_SEED to repeat)\n", seed);
	srandom(seed);
	xc_pair_opts(&a, &b, &o, &o);
	short_rng = seed | 1ull << 32;
	short_cuts = 0;
	short_every = 3;
	assert_int_equal(setsockopt(xrc_fd(a), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	/* and the receiving one too, fixed: the kernel grows a buffer its
	 * reader drains fast (tcp_rcv_space_adjust), and after a round or
	 * two a round's ~60 KB would fit whole, more so where the reader is
	 * slow to come back (TSan) */
	assert_int_equal(setsockopt(xrc_fd(b), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	for (int round = 0; round < ROUNDS; round++) {
		int sent = 0, got = 0;
		struct xrc_wc wc[64];

		for (int i = 0; i < N; i++) {
			len[i] = (size_t)(random() % (MAXSZ + 1));
			for (size_t k = 0; k < len[i]; k++)
				src[i][k] = (uint8_t)random();
			memset(dst[i], 0, MAXSZ);
			assert_int_equal(xrc_post_recv(b, &(struct xrc_sge){ dst[i], MAXSZ, NULL },
						       (uint64_t)i), 0);
		}
		/* b is not polled: the sockets fill up */
		for (int i = 0; i < N; i++) {
			struct xrc_sge sg = { src[i], (uint32_t)len[i], NULL };
			int n;

			assert_int_equal(xrc_post_send(a, &sg, 1, (uint64_t)i, XRC_SIGNALED), 0);
			assert_true((n = xrc_poll(a, wc, 64)) >= 0);
			sent += n;
		}
		assert_true(sent < N);	/* the sockets did fill */
		for (; got < N; got++) {
			struct xrc_wc w;

			xc_get_wc(b, a, &w);
			assert_int_equal(w.status, 0);
			assert_int_equal(w.wr_id, (uint64_t)got);
			assert_int_equal(w.len, len[got]);
			if (memcmp(dst[got], src[got], len[got]))
				fail_msg("seed %u: round %d message %d (%zu bytes) differs", seed,
					 round, got, len[got]);
			int n = xrc_poll(a, wc, 64);

			assert_true(n >= 0);
			sent += n;
		}
		while (sent < N) {
			struct xrc_wc w;

			xc_get_wc(a, b, &w);
			assert_int_equal(w.status, 0);
			sent++;
		}
	}
	short_every = 0;
	assert_true(short_cuts > 0);	/* the copy path was taken, and cut */
	xrc_close(a);
	xrc_close(b);
}

/* n sends of sz bytes each from src, unsignaled, wr_id their index. */
static void post_sends(struct xrc *a, uint8_t *src, int n, uint32_t sz)
{
	for (int i = 0; i < n; i++)
		assert_int_equal(xrc_post_send(a, &(struct xrc_sge){ src + (size_t)i * sz, sz, NULL },
					       1, (uint64_t)i, 0), 0);
}

/* A peer that sent 32 KiB and went: xrc_peer_gone() says so at once,
 * while the connection is still up with its bytes unread.  (Its FIN must
 * have left: one queued behind bytes the receiver has no room for is not
 * known to anyone but the sender's kernel.) */
static void test_peer_gone(void **state)
{
	enum { N = 1, SZ = 32768 };
	struct xrc_opts o = { .sq_depth = N, .rq_depth = 4 };
	struct xrc *a, *b;
	uint8_t *src = calloc(N, SZ);
	struct xrc_wc wc[64];
	int inq = 0;

	(void)state;
	xc_pair_opts(&a, &b, &o, &o);
	post_sends(a, src, N, SZ);
	for (int round = 0; round < 200; round++) {	/* b posts no receive */
		int outq = 1;

		/* b is not polled: what came stays in its socket */
		assert_true(xrc_poll(a, wc, 64) >= 0);
		assert_int_equal(ioctl(xrc_fd(a), SIOCOUTQ, &outq), 0);
		if (!xrc_tx_pending(a) && !outq)
			break;
		xrc_wait(a, 5 * XTIME_NS_PER_MS);
	}
	assert_false(xrc_peer_gone(b));
	assert_false(xrc_peer_gone(a));
	xrc_close(a);
	assert_int_equal(ioctl(xrc_fd(b), FIONREAD, &inq), 0);
	assert_true(inq > 0);
	assert_int_equal(xrc_state(b), XRC_UP);
	assert_true(xrc_peer_gone(b));
	free(src);
	xrc_close(b);
}

/* xrc_abort drops what the socket still holds for the peer, as a QP that
 * is destroyed sends nothing more: the peer gets what had reached it and
 * then the reset, not the rest.  (A close sends the rest, then a FIN.) */
static void test_abort(void **state)
{
	enum { N = 512, SZ = 65536 };
	struct xrc_opts o = { .sq_depth = N, .rq_depth = 64 };
	struct xrc *a, *b;
	uint8_t *src = calloc(N, SZ), *dst = malloc(SZ);
	struct xrc_wc wc[64];
	int inq = 0, outq = 0, got = 0;

	(void)state;
	xc_pair_opts(&a, &b, &o, &o);
	post_sends(a, src, N, SZ);
	for (int round = 0; round < 200; round++) {	/* b posts no receive */
		assert_true(xrc_poll(a, wc, 64) >= 0);
		assert_int_equal(xrc_poll(b, wc, 64), 0);
		if (xrc_wait(a, 5 * XTIME_NS_PER_MS) == 0)
			break;
	}
	assert_int_equal(ioctl(xrc_fd(b), FIONREAD, &inq), 0);
	assert_int_equal(ioctl(xrc_fd(a), SIOCOUTQ, &outq), 0);
	assert_true(outq > (512 << 10));	/* what a's socket still holds */
	xrc_abort(a);
	for (uint64_t end = xtime_ns() + 10 * XTIME_NS_PER_S; xrc_state(b) == XRC_UP;) {
		struct xrc_sge r = { dst, SZ, NULL };
		struct xrc_wc w;
		int n;

		assert_true(xtime_ns() < end);
		assert_int_equal(xrc_post_recv(b, &r, (uint64_t)got), 0);
		while ((n = xrc_poll(b, &w, 1)) == 0 && xrc_state(b) == XRC_UP)
			xrc_wait(b, 5 * XTIME_NS_PER_MS);
		if (n == 1 && w.status == 0)
			got++;
	}
	/* what b had when a went (its socket, and its own read buffer of
	 * 256 KiB at most), none of what a's socket held */
	assert_true((int64_t)got * SZ <= inq + (256 << 10));
	assert_true(got < N);
	free(src);
	free(dst);
	xrc_close(b);
}

/* A client that sends garbage is dropped (it reads EOF), one that stops
 * half-way through a header holds nothing up; a real one behind them gets
 * through. */
static void test_garbage_client(void **state)
{
	struct xrc_listener *l = xc_listen(NULL);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(xrc_listener_port(l)),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct xc_client cl;
	int junk = socket(AF_INET, SOCK_STREAM, 0), silent = socket(AF_INET, SOCK_STREAM, 0);
	uint8_t half[XTCP_HDR_MAX];
	struct xtcp_frame f = { .type = XTCP_CONN_REQ, .len = 4, .max_send = 1, .rq_depth = 1,
				.sq_depth = 1 };
	char err[256], c;
	struct xrc_req *r;
	const void *d;
	size_t n;

	(void)state;
	assert_int_equal(connect(junk, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(connect(silent, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(write(junk, "GET / HTTP/1.0\r\n\r\n", 18), 18);
	/* a client that stops half-way through a valid header */
	xtcp_encode(half, &f);
	assert_int_equal(write(silent, half, 12), 12);
	xc_connect_start(&cl, xrc_listener_port(l), NULL, "real", 4);
	r = xc_next_req(l);
	d = xrc_req_data(r, &n);
	assert_int_equal(n, 4);
	assert_memory_equal(d, "real", 4);
	struct xrc *s = xrc_accept(r, NULL, 0, NULL, err, sizeof(err));
	xc_connect_join(&cl);
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

/* Many clients at once (a reconnect storm): more connect requests than
 * the listener keeps half-read, all sent before it looks.  None is dropped
 * for lack of room: the newcomers wait in the backlog while the first
 * ones are read. */
static void test_many_at_once(void **state)
{
	enum { N = 150 };
	struct xrc_listener *l = xc_listen(NULL);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(xrc_listener_port(l)),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct xtcp_frame f = { .type = XTCP_CONN_REQ, .len = 4, .max_send = 1, .rq_depth = 1,
				.sq_depth = 1 };
	uint8_t req[XTCP_HDR_MAX + 4];
	size_t h = xtcp_encode(req, &f);
	int fds[N], got = 0;
	char err[256];

	(void)state;
	memcpy(req + h, "many", 4);
	for (int i = 0; i < N; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)) < 0)
			fail_msg("connect %d: %s", i, strerror(errno));
		assert_int_equal(write(fds[i], req, h + 4), (ssize_t)(h + 4));
	}
	for (uint64_t end = xtime_ns() + 10 * XTIME_NS_PER_S; got < N && xtime_ns() < end;) {
		struct pollfd p = { xrc_listener_fd(l), POLLIN, 0 };
		struct xrc_req *r = xrc_get_request(l, err, sizeof(err));

		if (r) {
			got++;
			xrc_reject(r, NULL, 0);
		} else {
			poll(&p, 1, 20);
		}
	}
	assert_int_equal(got, N);
	assert_int_equal(xrc_listener_dropped(l), 0);
	for (int i = 0; i < N; i++)
		close(fds[i]);
	xrc_listener_close(l);
}

/* The listener's table of half-read connect requests filled with clients
 * that connect and say nothing, one client more behind them with a whole
 * CONN_REQ, the listener's fd polled as a server would.  While the
 * silent ones are younger than the grace the newcomer waits in the
 * backlog, and the listener rests between looks instead of spinning;
 * then the oldest gives way (it reads EOF, counted dropped) and the
 * newcomer is served.  Only the lower bound is exact: no slot can be
 * free before the first silent client is a grace old. */
static void full_table(void)
{
	enum { N = XTCP_PENDING_MAX };
	/* no silent client times out meanwhile */
	struct xrc_listener *l = xc_listen(&(struct xrc_opts){ .timeout_ns = 60 * XTIME_NS_PER_S });
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(xrc_listener_port(l)),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct xtcp_frame f = { .type = XTCP_CONN_REQ, .len = 4, .max_send = 1, .rq_depth = 1,
				.sq_depth = 1 };
	uint8_t req[XTCP_HDR_MAX + 4];
	size_t h = xtcp_encode(req, &f), n;
	struct pollfd held;
	struct xrc_req *r = NULL;
	int silent[N], late;
	unsigned wakes = 0;
	uint64_t t0, waited;
	char err[256], c;
	const void *d;

	memcpy(req + h, "late", 4);
	t0 = xtime_ns();
	for (int i = 0; i < N; i++) {
		silent[i] = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(silent[i], (struct sockaddr *)&sa, sizeof(sa)) < 0)
			fail_msg("connect %d: %s", i, strerror(errno));
		/* taken in as they come: ages in the order of connecting */
		assert_null(xrc_get_request(l, err, sizeof(err)));
	}
	late = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(connect(late, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(write(late, req, h + 4), (ssize_t)(h + 4));
	while (xtime_ns() - t0 < 10 * XTIME_NS_PER_S) {
		struct pollfd p = { xrc_listener_fd(l), POLLIN, 0 };

		if ((r = xrc_get_request(l, err, sizeof(err))))
			break;
		assert_int_equal(errno, EAGAIN);
		poll(&p, 1, 100);
		wakes++;
	}
	waited = xtime_ns() - t0;
	assert_non_null(r);
	d = xrc_req_data(r, &n);
	assert_int_equal(n, 4);
	assert_memory_equal(d, "late", 4);
	if (waited < XTCP_PENDING_GRACE_NS || waited > 5 * XTIME_NS_PER_S)
		fail_msg("the newcomer was served %llu ms after the table began to fill",
			 (unsigned long long)(waited / 1000000));
	/* a look every 10 ms is about 200 wakes in the second; a busy
	 * loop, at least a hundred times that */
	if (wakes > 3000)
		fail_msg("%u wakes in %llu ms: the listener spins", wakes,
			 (unsigned long long)(waited / 1000000));
	assert_int_equal(xrc_listener_dropped(l), 1);
	/* the oldest gave way, the next one is still held */
	assert_int_equal(read(silent[0], &c, 1), 0);
	held = (struct pollfd){ silent[1], POLLIN, 0 };
	assert_int_equal(poll(&held, 1, 0), 0);
	xrc_reject(r, NULL, 0);
	for (int i = 0; i < N; i++)
		close(silent[i]);
	close(late);
	xrc_listener_close(l);
}

static void test_full_table(void **state)
{
	(void)state;
	full_table();
}

/* The same when the pause timer cannot be armed: the listening socket
 * stays in the set, and the listener must still not spin on it. */
static void test_full_table_no_timer(void **state)
{
	(void)state;
	settime_fails = true;
	full_table();
}

/* full_table() with n re-watches of the listening socket failing, and the
 * pause timer with them. */
static void full_table_no_watch(unsigned n)
{
	watch_failed = watch_adds = 0;
	watch_fails = n;
	full_table();
	assert_int_equal(watch_failed, n);
}

/* The same when, at the end of a pause, the listening socket cannot go
 * back into the set and the timer for another pause cannot be armed
 * either: the listener still comes back (it rests between tries). */
static void test_full_table_no_watch(void **state)
{
	(void)state;
	full_table_no_watch(3);
}

/* The same for longer than the listener waits in place (a second): it
 * goes on serving, says so, and every later look tries again until the
 * socket is back. */
static void test_full_table_no_watch_long(void **state)
{
	(void)state;
	full_table_no_watch(110);
}

static int settime_on(void **state)
{
	(void)state;
	settime_fails = false;
	watch_fails = 0;
	watch_timer_down = false;
	return 0;
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
	struct xc_client cl;
	u.port = xrc_listener_port(l);
	xc_connect_start_uri(&cl, &u, NULL, NULL, 0);
	struct xrc_req *r = xc_next_req(l);
	assert_true(strncmp(xrc_req_peer(r), "[::1]:", 6) == 0);
	struct xrc *s = xrc_accept(r, NULL, 0, NULL, err, sizeof(err));
	xc_connect_join(&cl);
	assert_non_null(s);
	assert_non_null(cl.c);
	char buf[8] = { 0 }, six[] = "six";
	struct xrc_sge rs = { buf, 8, NULL }, ss = { six, 3, NULL };
	assert_int_equal(xrc_post_recv(s, &rs, 1), 0);
	assert_int_equal(xrc_post_send(cl.c, &ss, 1, 2, 0), 0);
	xc_expect_wc(s, cl.c, 1, XRC_OP_RECV, 0);
	assert_string_equal(buf, "six");
	xrc_close(s);
	xrc_close(cl.c);
	xrc_listener_close(l);
}

/* The domain's key table with many keys in it.  A deregistered region
 * takes down exactly the windows bound over it at that moment (not one
 * rebound elsewhere, not one freed before), a closed connection exactly
 * its type-2 windows; and a freed slot is the last one reused, so a
 * region's stale key stays refused through more than the 4095
 * registrations that wrap one slot's generation. */
static void test_key_table(void **state)
{
	enum { NW = 600, RW = XRC_ACCESS_REMOTE_WRITE | XRC_ACCESS_REMOTE_READ };
	struct xc_pair p = { 0 }, q = { 0 };
	static char ma[NW * 64], mb[NW * 64], src[8] = "keytable";
	static struct xrc_mr *pad[NW];
	static struct xrc_win *w[NW];
	static uint32_t first[NW];
	struct xrc_mr *a, *b, *lmr, *r;
	struct xrc_win *t2p, *t2q;
	uintptr_t ba = (uintptr_t)ma, bb = (uintptr_t)mb;
	uint32_t stale;
	uint64_t id = 1;

	(void)state;
	xc_pair_up(&p);
	xc_pair_up(&q);
	lmr = xc_reg(p.a, src, sizeof(src), XRC_ACCESS_LOCAL_WRITE);
	a = xc_reg(p.b, ma, sizeof(ma), XRC_ACCESS_LOCAL_WRITE);
	b = xc_reg(p.b, mb, sizeof(mb), XRC_ACCESS_LOCAL_WRITE);
	/* window i over a (i % 3 == 0), over b (1), over a and then b (2);
	 * regions between them, half of them freed, spread their slots */
	for (int i = 0; i < NW; i++) {
		pad[i] = xc_reg(p.b, ma, 64, XRC_ACCESS_LOCAL_WRITE);
		w[i] = xc_win_new(p.b, 0);
		assert_int_equal(xrc_win_bind(p.b, w[i], i % 3 == 1 ? b : a,
					      (i % 3 == 1 ? mb : ma) + i * 64, 64, RW, id,
					      XRC_SIGNALED), 0);
		xc_expect_wc(p.b, p.a, id++, XRC_OP_BIND, 0);
		first[i] = xrc_win_rkey(w[i]);
		if (i % 2) {
			xrc_dereg(pad[i]);
			pad[i] = NULL;
		}
	}
	for (int i = 2; i < NW; i += 3) {
		assert_int_equal(xrc_win_bind(p.b, w[i], b, mb + i * 64, 64, RW, id, XRC_SIGNALED),
				 0);
		xc_expect_wc(p.b, p.a, id++, XRC_OP_BIND, 0);
	}
	/* a window freed while bound over a is no concern of a's any more */
	xrc_win_free(w[0]);
	w[0] = NULL;
	t2p = xc_win_new(p.b, XRC_WIN_TYPE2);
	t2q = xc_win_new(q.b, XRC_WIN_TYPE2);
	assert_int_equal(xrc_win_bind(p.b, t2p, b, mb, 64, RW, id, XRC_SIGNALED), 0);
	xc_expect_wc(p.b, p.a, id++, XRC_OP_BIND, 0);
	assert_int_equal(xrc_win_bind(q.b, t2q, b, mb + 64, 64, RW, id, XRC_SIGNALED), 0);
	xc_expect_wc(q.b, q.a, id++, XRC_OP_BIND, 0);

	xrc_dereg(a);
	for (int i = 1; i < NW; i++) {
		uint64_t at = (i % 3 ? bb : ba) + (uint64_t)i * 64;
		int st = xc_write_st(p.a, p.b, lmr, src, 8, at, xrc_win_rkey(w[i]));

		if (i % 3 == 0)
			xc_refused(&p, st);
		else
			assert_int_equal(st, 0);
		if (i % 3 == 2)	/* the key of its bind over a died with the rebind */
			xc_refused(&p, xc_write_st(p.a, p.b, lmr, src, 8, ba + (uint64_t)i * 64,
						   first[i]));
	}
	/* q's connection goes: its type-2 window with it, p's stays */
	xc_pair_down(&q);
	assert_int_equal(xrc_win_bind(p.b, t2q, b, mb, 64, RW, id, 0), -EBUSY);
	assert_int_equal(xc_write_st(p.a, p.b, lmr, src, 8, bb, xrc_win_rkey(t2p)), 0);
	xrc_win_free(t2q);

	xrc_dereg(b);
	xc_refused(&p, xc_write_st(p.a, p.b, lmr, src, 8, bb, xrc_win_rkey(t2p)));
	for (int i = 1; i < NW; i += 3)
		xc_refused(&p, xc_write_st(p.a, p.b, lmr, src, 8, bb + (uint64_t)i * 64,
					   xrc_win_rkey(w[i])));
	xrc_win_free(t2p);
	for (int i = 0; i < NW; i++) {
		xrc_win_free(w[i]);
		xrc_dereg(pad[i]);
	}

	/* a stale key through a churn of registrations */
	r = xc_reg(p.b, ma, sizeof(ma), RW);
	stale = r->rkey;
	xrc_dereg(r);
	for (int i = 0; i < 4096; i++) {
		r = xc_reg(p.b, ma, sizeof(ma), RW);
		assert_int_not_equal(r->rkey, stale);
		if (i < 4095)
			xrc_dereg(r);
	}
	xc_refused(&p, xc_write_st(p.a, p.b, lmr, src, 8, ba, stale));
	assert_int_equal(xc_write_st(p.a, p.b, lmr, src, 8, ba, r->rkey), 0);
	xrc_dereg(r);
	xrc_dereg(lmr);
	xc_pair_down(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		XC_CONTRACT_TESTS,
		cmocka_unit_test(test_opts_fit),
		cmocka_unit_test(test_connect_timeout),
		cmocka_unit_test(test_backpressure),
		cmocka_unit_test(test_ready_hints),
		cmocka_unit_test(test_ack_delay),
		cmocka_unit_test(test_mixed_sizes),
		cmocka_unit_test_teardown(test_small_partial, short_off),
		cmocka_unit_test(test_peer_gone),
		cmocka_unit_test(test_abort),
		cmocka_unit_test(test_garbage_client),
		cmocka_unit_test(test_many_at_once),
		cmocka_unit_test(test_full_table),
		cmocka_unit_test_teardown(test_full_table_no_timer, settime_on),
		cmocka_unit_test_teardown(test_full_table_no_watch, settime_on),
		cmocka_unit_test_teardown(test_full_table_no_watch_long, settime_on),
		cmocka_unit_test(test_ipv6),
		cmocka_unit_test(test_key_table),
	};

	XC.scheme = XURI_TCP;
	snprintf(XC.host, sizeof(XC.host), "127.0.0.1");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
