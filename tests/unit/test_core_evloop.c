#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/evloop.h"
#include "core/xtime.h"

#define MS 1000000ull

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000), .tv_nsec = (long)(ns % 1000000000) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

struct fdrec {
	int calls;
	int fd;
	uint32_t revents;
};

static void fd_cb(struct xloop *l, int fd, uint32_t revents, void *arg)
{
	struct fdrec *r = arg;
	char buf[16];

	r->calls++;
	r->fd = fd;
	r->revents = revents;
	if (revents & EPOLLIN)
		assert_true(read(fd, buf, sizeof(buf)) > 0);
}

static void test_fd(void **state)
{
	struct xloop *l = xloop_new();
	struct fdrec r = { 0 }, w = { 0 };
	int p[2];

	(void)state;
	assert_non_null(l);
	assert_int_equal(pipe(p), 0);
	assert_int_equal(xloop_add_fd(l, p[0], EPOLLIN, fd_cb, &r), 0);
	assert_int_equal(xloop_add_fd(l, p[0], EPOLLIN, fd_cb, &r), -EEXIST);
	assert_int_equal(xloop_add_fd(l, -1, EPOLLIN, fd_cb, &r), -EBADF);
	assert_int_equal(xloop_mod_fd(l, p[1], EPOLLOUT), -ENOENT);
	assert_int_equal(xloop_del_fd(l, p[1]), -ENOENT);

	/* Nothing readable: the timeout expires with no callback. */
	assert_int_equal(xloop_run_once(l, 10), 0);
	assert_int_equal(r.calls, 0);

	assert_int_equal(write(p[1], "x", 1), 1);
	assert_int_equal(xloop_run_once(l, 1000), 1);
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.fd, p[0]);
	assert_true(r.revents & EPOLLIN);

	/* Writable end: events follow mod_fd. */
	assert_int_equal(xloop_add_fd(l, p[1], EPOLLOUT, fd_cb, &w), 0);
	assert_int_equal(xloop_run_once(l, 1000), 1);
	assert_int_equal(w.calls, 1);
	assert_true(w.revents & EPOLLOUT);
	assert_int_equal(xloop_mod_fd(l, p[1], 0), 0);
	assert_int_equal(xloop_run_once(l, 10), 0);
	assert_int_equal(w.calls, 1);

	assert_int_equal(xloop_del_fd(l, p[0]), 0);
	assert_int_equal(write(p[1], "x", 1), 1);
	assert_int_equal(xloop_run_once(l, 10), 0);
	assert_int_equal(r.calls, 1);
	xloop_free(l);
	close(p[0]);
	close(p[1]);
	xloop_free(NULL);
}

/* Both pipes are readable in the same round; whichever callback runs first
 * deletes both, and replaces the other fd number with a fresh (empty) pipe
 * under another callback.  The stale event must reach neither. */
struct delctx {
	struct xloop *l;
	int a[2], b[2];
	int keep; /* write end of the replacement pipe: no EPOLLHUP */
	int calls, stale_calls;
};

static void stale_cb(struct xloop *l, int fd, uint32_t revents, void *arg)
{
	struct delctx *c = arg;

	c->stale_calls++;
}

static void del_cb(struct xloop *l, int fd, uint32_t revents, void *arg)
{
	struct delctx *c = arg;
	int other = fd == c->a[0] ? c->b[0] : c->a[0];
	int np[2];

	c->calls++;
	assert_int_equal(xloop_del_fd(l, fd), 0);
	assert_int_equal(xloop_del_fd(l, other), 0);
	assert_int_equal(pipe(np), 0);
	assert_int_equal(dup2(np[0], other), other);
	close(np[0]);
	c->keep = np[1];
	assert_int_equal(xloop_add_fd(l, other, EPOLLIN, stale_cb, c), 0);
}

static void test_del_in_callback(void **state)
{
	struct delctx c = { .l = xloop_new() };

	(void)state;
	assert_int_equal(pipe(c.a), 0);
	assert_int_equal(pipe(c.b), 0);
	assert_int_equal(write(c.a[1], "x", 1), 1);
	assert_int_equal(write(c.b[1], "x", 1), 1);
	assert_int_equal(xloop_add_fd(c.l, c.a[0], EPOLLIN, del_cb, &c), 0);
	assert_int_equal(xloop_add_fd(c.l, c.b[0], EPOLLIN, del_cb, &c), 0);
	/* Let both become ready before the single wait. */
	assert_int_equal(xloop_run_once(c.l, 1000), 1);
	assert_int_equal(c.calls, 1);
	assert_int_equal(c.stale_calls, 0);
	assert_int_equal(xloop_run_once(c.l, 10), 0);
	assert_int_equal(c.stale_calls, 0);
	xloop_free(c.l);
	for (int i = 0; i < 2; i++) {
		close(c.a[i]);
		close(c.b[i]);
	}
	close(c.keep);
}

struct order {
	uint64_t start;
	char seq[32];
	int n;
	int periodic_left;
	struct xtimer *periodic;
};

struct tag {
	struct order *o;
	char name;
	uint64_t due; /* ns after start */
};

static void order_cb(struct xloop *l, struct xtimer *t, void *arg)
{
	struct tag *tg = arg;
	struct order *o = tg->o;

	/* Never early. */
	assert_true(xtime_ns() >= o->start + tg->due);
	o->seq[o->n++] = tg->name;
	if (tg->name == 'P') {
		tg->due += 30 * MS;
		if (--o->periodic_left == 0)
			xloop_timer_cancel(l, t); /* its own, from inside */
	}
}

static void test_timer_order(void **state)
{
	struct xloop *l = xloop_new();
	struct order o = { .periodic_left = 3 };
	struct tag a = { &o, 'A', 20 * MS }, b = { &o, 'B', 50 * MS }, c = { &o, 'C', 80 * MS };
	struct tag p = { &o, 'P', 30 * MS };
	uint64_t until;

	(void)state;
	o.start = xtime_ns();
	/* Added out of order on purpose. */
	assert_non_null(xloop_timer_add(l, 80 * MS, 0, order_cb, &c));
	assert_non_null(xloop_timer_add(l, 30 * MS, 30 * MS, order_cb, &p));
	assert_non_null(xloop_timer_add(l, 50 * MS, 0, order_cb, &b));
	assert_non_null(xloop_timer_add(l, 20 * MS, 0, order_cb, &a));
	until = xtime_ns() + 200 * MS;
	while (xtime_ns() < until)
		assert_true(xloop_run_once(l, 10) >= 0);
	o.seq[o.n] = '\0';
	assert_string_equal(o.seq, "APBPCP");
	xloop_free(l);
}

struct cancelctx {
	struct xtimer *victim, *self;
	int fired_victim, fired_self;
};

static void victim_cb(struct xloop *l, struct xtimer *t, void *arg)
{
	((struct cancelctx *)arg)->fired_victim++;
}

static void canceller_cb(struct xloop *l, struct xtimer *t, void *arg)
{
	struct cancelctx *c = arg;

	c->fired_self++;
	xloop_timer_cancel(l, c->victim);
	xloop_timer_cancel(l, t); /* one-shot cancelling itself: freed once */
}

static void test_timer_cancel(void **state)
{
	struct xloop *l = xloop_new();
	struct cancelctx c = { 0 };
	struct xtimer *never;
	uint64_t until;

	(void)state;
	c.victim = xloop_timer_add(l, 30 * MS, 5 * MS, victim_cb, &c);
	assert_non_null(xloop_timer_add(l, 10 * MS, 0, canceller_cb, &c));
	never = xloop_timer_add(l, 20 * MS, 0, victim_cb, &c);
	xloop_timer_cancel(l, never);
	xloop_timer_cancel(l, NULL);
	until = xtime_ns() + 60 * MS;
	while (xtime_ns() < until)
		assert_true(xloop_run_once(l, 5) >= 0);
	assert_int_equal(c.fired_self, 1);
	assert_int_equal(c.fired_victim, 0);
	/* A pending timer is freed by xloop_free (ASan checks). */
	assert_non_null(xloop_timer_add(l, 1000 * MS, 0, victim_cb, &c));
	xloop_free(l);
}

struct slowctx {
	uint64_t start, fired[8];
	int n;
};

static void slow_cb(struct xloop *l, struct xtimer *t, void *arg)
{
	struct slowctx *s = arg;

	s->fired[s->n++] = xtime_ns() - s->start;
	if (s->n == 1)
		sleep_ns(35 * MS);
	if (s->n == 3)
		xloop_stop(l);
}

/* A callback overrunning three periods does not cause a burst of catch-up
 * firings: the next one is on the original grid (start + 50 ms). */
static void test_periodic_skip(void **state)
{
	struct xloop *l = xloop_new();
	struct slowctx s;

	(void)state;
	s.n = 0;
	s.start = xtime_ns();
	assert_non_null(xloop_timer_add(l, 10 * MS, 10 * MS, slow_cb, &s));
	assert_int_equal(xloop_run(l), 0);
	assert_int_equal(s.n, 3);
	assert_true(s.fired[0] >= 10 * MS);
	assert_true(s.fired[1] >= 50 * MS);
	assert_true(s.fired[2] >= 60 * MS);
	xloop_free(l);
}

static void *waker(void *arg)
{
	sleep_ns(50 * MS);
	assert_int_equal(xloop_wake(arg), 0);
	return NULL;
}

static void test_wake(void **state)
{
	struct xloop *l = xloop_new();
	pthread_t th;
	uint64_t t0;

	(void)state;
	/* A wake before the wait is not lost. */
	assert_int_equal(xloop_wake(l), 0);
	assert_int_equal(xloop_wake(l), 0);
	assert_int_equal(xloop_run_once(l, -1), 0);

	t0 = xtime_ns();
	assert_int_equal(pthread_create(&th, NULL, waker, l), 0);
	assert_int_equal(xloop_run_once(l, -1), 0);
	assert_true(xtime_ns() - t0 >= 40 * MS);
	pthread_join(th, NULL);
	xloop_free(l);
}

static void stop_cb(struct xloop *l, struct xtimer *t, void *arg)
{
	if (++*(int *)arg % 3 == 0)
		xloop_stop(l);
}

static void test_run_stop(void **state)
{
	struct xloop *l = xloop_new();
	int n = 0;

	(void)state;
	assert_non_null(xloop_timer_add(l, 0, 2 * MS, stop_cb, &n));
	assert_int_equal(xloop_run(l), 0);
	assert_int_equal(n, 3);
	/* The stop was consumed: run again until the next stop. */
	assert_int_equal(xloop_run(l), 0);
	assert_int_equal(n, 6);
	xloop_free(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fd),
		cmocka_unit_test(test_del_in_callback),
		cmocka_unit_test(test_timer_order),
		cmocka_unit_test(test_timer_cancel),
		cmocka_unit_test(test_periodic_skip),
		cmocka_unit_test(test_wake),
		cmocka_unit_test(test_run_stop),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
