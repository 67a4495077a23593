/* epoll event loop with monotonic timers.
 *
 * Only the thread running the loop may call into it, except xloop_wake().
 * Callbacks may add/modify/delete fds and add/cancel timers, including their
 * own registration; they must not free the loop. */
#ifndef XPRT_CORE_EVLOOP_H
#define XPRT_CORE_EVLOOP_H

#include <stdint.h>
#include <sys/epoll.h>

struct xloop;
struct xtimer;

typedef void (*xloop_fd_cb)(struct xloop *l, int fd, uint32_t revents, void *arg);
typedef void (*xloop_timer_cb)(struct xloop *l, struct xtimer *t, void *arg);

struct xloop *xloop_new(void);  /* NULL + errno */
void xloop_free(struct xloop *l); /* NULL ok; frees timers, does not close registered fds */

/* events: EPOLLIN, EPOLLOUT, EPOLLET...  0 or -errno (-EEXIST if already
 * registered, -ENOENT from mod/del when not registered). */
int xloop_add_fd(struct xloop *l, int fd, uint32_t events, xloop_fd_cb cb, void *arg);
int xloop_mod_fd(struct xloop *l, int fd, uint32_t events);
/* Safe from any callback: events already collected for fd are dropped.
 * Call it before close(fd). */
int xloop_del_fd(struct xloop *l, int fd);

/* First fires delay_ns from now, then every period_ns (0 = one-shot).
 * Periodic deadlines advance from the previous deadline, so they do not
 * drift; periods missed while the loop was busy are skipped, not replayed.
 * A one-shot timer is freed after its callback returns, so its handle is
 * dead from then on.  Returns NULL + errno. */
struct xtimer *xloop_timer_add(struct xloop *l, uint64_t delay_ns, uint64_t period_ns,
			       xloop_timer_cb cb, void *arg);
/* NULL ok.  Safe from any callback, including the timer's own. */
void xloop_timer_cancel(struct xloop *l, struct xtimer *t);

/* Runs rounds until xloop_stop(); 0 or -errno. */
int xloop_run(struct xloop *l);
/* One epoll wait (at most timeout_ms, -1 = until an fd, a timer or a wake)
 * then the due timers.  Returns the number of callbacks run, or -errno. */
int xloop_run_once(struct xloop *l, int timeout_ms);
/* Makes xloop_run() return after the current round. */
void xloop_stop(struct xloop *l);
/* Thread-safe: wakes a blocked run/run_once.  0 or -errno. */
int xloop_wake(struct xloop *l);

#endif
