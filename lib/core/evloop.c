#include "core/evloop.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "core/xtime.h"

#define MAX_EVENTS 64
/* epoll data for the wake eventfd; fd entries use (gen << 32 | fd). */
#define WAKE_TAG UINT64_MAX

struct fdent {
	xloop_fd_cb cb;
	void *arg;
	uint32_t gen; /* 0 = free slot */
};

struct xtimer {
	uint64_t deadline, period, seq;
	xloop_timer_cb cb;
	void *arg;
	size_t idx; /* position in the heap, NOT_QUEUED while running */
	bool cancelled;
};

#define NOT_QUEUED SIZE_MAX

struct xloop {
	int epfd, wakefd;
	bool stop;
	bool no_pwait2; /* kernel or seccomp refuses epoll_pwait2 */
	struct fdent *fds;
	size_t nfds;
	uint32_t gen;
	struct xtimer **heap;
	size_t nheap, capheap;
	size_t ntimers; /* queued + running; the heap always has room for all */
	uint64_t seq;
	struct xtimer *running;
};

struct xloop *xloop_new(void)
{
	struct xloop *l = calloc(1, sizeof(*l));
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = WAKE_TAG };
	int e;

	if (!l)
		return NULL;
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->epfd < 0)
		goto out_free_loop;
	l->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (l->wakefd < 0)
		goto out_close_epoll;
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->wakefd, &ev) < 0)
		goto out_close_wakefd;
	return l;

out_close_wakefd:
	e = errno;
	close(l->wakefd);
	errno = e;
out_close_epoll:
	e = errno;
	close(l->epfd);
	errno = e;
out_free_loop:
	free(l);
	return NULL;
}

void xloop_free(struct xloop *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->nheap; i++)
		free(l->heap[i]);
	free(l->heap);
	free(l->fds);
	close(l->wakefd);
	close(l->epfd);
	free(l);
}

static struct fdent *fd_lookup(struct xloop *l, int fd)
{
	if (fd < 0 || (size_t)fd >= l->nfds || l->fds[fd].gen == 0)
		return NULL;
	return &l->fds[fd];
}

int xloop_add_fd(struct xloop *l, int fd, uint32_t events, xloop_fd_cb cb, void *arg)
{
	struct epoll_event ev = { .events = events };
	struct fdent *e;

	if (fd < 0)
		return -EBADF;
	if (!cb)
		return -EINVAL;
	if (fd_lookup(l, fd))
		return -EEXIST;
	if ((size_t)fd >= l->nfds) {
		size_t n = l->nfds ? l->nfds : 16;
		struct fdent *nf;

		while (n <= (size_t)fd)
			n *= 2;
		nf = realloc(l->fds, n * sizeof(*nf));
		if (!nf)
			return -ENOMEM;
		memset(nf + l->nfds, 0, (n - l->nfds) * sizeof(*nf));
		l->fds = nf;
		l->nfds = n;
	}
	/* A fresh generation per registration, so events collected for an
	 * earlier registration of the same fd number are recognised as stale. */
	if (++l->gen == 0)
		l->gen = 1;
	ev.data.u64 = (uint64_t)l->gen << 32 | (uint32_t)fd;
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		return -errno;
	e = &l->fds[fd];
	e->cb = cb;
	e->arg = arg;
	e->gen = l->gen;
	return 0;
}

int xloop_mod_fd(struct xloop *l, int fd, uint32_t events)
{
	struct fdent *e = fd_lookup(l, fd);
	struct epoll_event ev = { .events = events };

	if (!e)
		return -ENOENT;
	ev.data.u64 = (uint64_t)e->gen << 32 | (uint32_t)fd;
	return epoll_ctl(l->epfd, EPOLL_CTL_MOD, fd, &ev) < 0 ? -errno : 0;
}

int xloop_del_fd(struct xloop *l, int fd)
{
	struct fdent *e = fd_lookup(l, fd);
	int r = 0;

	if (!e)
		return -ENOENT;
	/* EBADF: the caller closed it first; the kernel already forgot it. */
	if (epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL) < 0 && errno != EBADF)
		r = -errno;
	e->gen = 0;
	e->cb = NULL;
	return r;
}

/* ---- timer heap, ordered by (deadline, seq) so equal deadlines fire in
 * the order they were armed ---- */

static bool before(const struct xtimer *a, const struct xtimer *b)
{
	return a->deadline < b->deadline || (a->deadline == b->deadline && a->seq < b->seq);
}

static void heap_set(struct xloop *l, size_t i, struct xtimer *t)
{
	l->heap[i] = t;
	t->idx = i;
}

static void heap_up(struct xloop *l, size_t i)
{
	struct xtimer *t = l->heap[i];

	while (i > 0 && before(t, l->heap[(i - 1) / 2])) {
		heap_set(l, i, l->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	heap_set(l, i, t);
}

static void heap_down(struct xloop *l, size_t i)
{
	struct xtimer *t = l->heap[i];

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= l->nheap)
			break;
		if (c + 1 < l->nheap && before(l->heap[c + 1], l->heap[c]))
			c++;
		if (!before(l->heap[c], t))
			break;
		heap_set(l, i, l->heap[c]);
		i = c;
	}
	heap_set(l, i, t);
}

/* Re-arming a periodic timer must not fail, so room for every live timer is
 * reserved when it is added. */
static int heap_reserve(struct xloop *l, size_t n)
{
	size_t cap = l->capheap ? l->capheap : 16;
	struct xtimer **h;

	if (n <= l->capheap)
		return 0;
	while (cap < n)
		cap *= 2;
	h = realloc(l->heap, cap * sizeof(*h));
	if (!h)
		return -ENOMEM;
	l->heap = h;
	l->capheap = cap;
	return 0;
}

static void heap_push(struct xloop *l, struct xtimer *t)
{
	t->seq = l->seq++;
	heap_set(l, l->nheap++, t);
	heap_up(l, t->idx);
}

static void heap_remove(struct xloop *l, struct xtimer *t)
{
	size_t i = t->idx;
	struct xtimer *last = l->heap[--l->nheap];

	t->idx = NOT_QUEUED;
	if (last == t)
		return;
	heap_set(l, i, last);
	if (i > 0 && before(last, l->heap[(i - 1) / 2]))
		heap_up(l, i);
	else
		heap_down(l, i);
}

struct xtimer *xloop_timer_add(struct xloop *l, uint64_t delay_ns, uint64_t period_ns,
			       xloop_timer_cb cb, void *arg)
{
	struct xtimer *t;
	uint64_t now = xtime_ns();

	if (!cb) {
		errno = EINVAL;
		return NULL;
	}
	if (heap_reserve(l, l->ntimers + 1) < 0) {
		errno = ENOMEM;
		return NULL;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->deadline = delay_ns > UINT64_MAX - now ? UINT64_MAX : now + delay_ns;
	t->period = period_ns;
	t->cb = cb;
	t->arg = arg;
	l->ntimers++;
	heap_push(l, t);
	return t;
}

void xloop_timer_cancel(struct xloop *l, struct xtimer *t)
{
	if (!t)
		return;
	if (t == l->running) {
		/* run_timers frees it once the callback returns. */
		t->cancelled = true;
		return;
	}
	heap_remove(l, t);
	l->ntimers--;
	free(t);
}

static int run_timers(struct xloop *l)
{
	uint64_t now = xtime_ns(), limit = l->seq;
	int ran = 0;

	/* Timers armed by these callbacks (seq >= limit) wait for the next
	 * round, so a callback re-arming a zero delay cannot starve fds. */
	while (l->nheap && l->heap[0]->deadline <= now && l->heap[0]->seq < limit) {
		struct xtimer *t = l->heap[0];

		heap_remove(l, t);
		l->running = t;
		t->cb(l, t, t->arg);
		l->running = NULL;
		ran++;
		if (t->cancelled || t->period == 0) {
			l->ntimers--;
			free(t);
			continue;
		}
		/* Re-read the clock: the callback itself may have been slow, and
		 * periods it overran are skipped rather than fired back to back. */
		uint64_t steps = (xtime_ns() - t->deadline) / t->period + 1;

		if (t->period > (UINT64_MAX - t->deadline) / steps)
			t->deadline = UINT64_MAX;
		else
			t->deadline += steps * t->period;
		heap_push(l, t);
	}
	return ran;
}

/* Wait time in ns until the nearest timer, capped by the caller's timeout;
 * -1 when there is nothing to wait for but fds. */
static int64_t wait_ns(const struct xloop *l, int timeout_ms)
{
	int64_t w = timeout_ms < 0 ? -1 : (int64_t)timeout_ms * 1000000;

	if (l->nheap) {
		uint64_t now = xtime_ns(), dl = l->heap[0]->deadline;
		int64_t t = dl <= now ? 0 : dl - now > INT64_MAX / 2 ? INT64_MAX / 2 : (int64_t)(dl - now);

		if (w < 0 || t < w)
			w = t;
	}
	return w;
}

static int wait_events(struct xloop *l, struct epoll_event *evs, int64_t ns)
{
	int n;

	if (!l->no_pwait2) {
		struct timespec ts = { .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 };

		n = epoll_pwait2(l->epfd, evs, MAX_EVENTS, ns < 0 ? NULL : &ts, NULL);
		if (n >= 0 || (errno != ENOSYS && errno != EPERM))
			return n;
		l->no_pwait2 = true;
	}
	/* Round up, so that a timer is never early and we do not spin on a
	 * zero timeout for the last fraction of a millisecond. */
	if (ns < 0)
		return epoll_wait(l->epfd, evs, MAX_EVENTS, -1);
	ns = (ns + 999999) / 1000000;
	return epoll_wait(l->epfd, evs, MAX_EVENTS, ns > INT_MAX ? INT_MAX : (int)ns);
}

int xloop_run_once(struct xloop *l, int timeout_ms)
{
	struct epoll_event evs[MAX_EVENTS];
	int n, ran = 0;

	n = wait_events(l, evs, wait_ns(l, timeout_ms));
	if (n < 0) {
		if (errno != EINTR)
			return -errno;
		n = 0;
	}
	for (int i = 0; i < n; i++) {
		uint64_t tag = evs[i].data.u64;
		struct fdent *e;
		int fd;

		if (tag == WAKE_TAG) {
			uint64_t v;

			/* Drain, so the eventfd stops being readable. */
			if (read(l->wakefd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				return -errno;
			continue;
		}
		fd = (int)(uint32_t)tag;
		e = fd_lookup(l, fd);
		/* Deleted (or deleted and re-added) by an earlier callback. */
		if (!e || e->gen != (uint32_t)(tag >> 32))
			continue;
		e->cb(l, fd, evs[i].events, e->arg);
		ran++;
	}
	return ran + run_timers(l);
}

int xloop_run(struct xloop *l)
{
	/* Atomic only so that a stop+wake from a signal handler or another
	 * thread is not a data race; ordering comes from the eventfd. */
	while (!__atomic_load_n(&l->stop, __ATOMIC_RELAXED)) {
		int r = xloop_run_once(l, -1);

		if (r < 0)
			return r;
	}
	__atomic_store_n(&l->stop, false, __ATOMIC_RELAXED);
	return 0;
}

void xloop_stop(struct xloop *l)
{
	__atomic_store_n(&l->stop, true, __ATOMIC_RELAXED);
}

int xloop_wake(struct xloop *l)
{
	uint64_t one = 1;

	/* EAGAIN: the counter is saturated, so a wake is already pending. */
	if (write(l->wakefd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		return -errno;
	return 0;
}
