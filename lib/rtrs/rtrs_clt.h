/* RTRS client: one session of several paths to one server, each path
 * `connections` xrc connections (connection 0 the service connection),
 * byte-compatible with the Linux kernel's rtrs-server over rdma:// and
 * carried the same way over tcp:// (doc/rtrs-design.md "Client engine").
 *
 * Single-threaded and poll-driven like xrc: the caller owns the loop,
 * sleeps on rtrs_clt_fd() after rtrs_clt_arm() returned 0, and calls
 * rtrs_clt_poll(now) whenever it wakes or rtrs_clt_next_timer() is due.
 * Request confirmations and link events run only inside rtrs_clt_poll()
 * (seed 002's completion rule), never inside rtrs_clt_request().  The one
 * helper thread is the connector: a path that reconnects at run time does
 * its blocking rdma_cm/TCP handshake and the INFO exchange there, so the
 * other paths keep doing IO meanwhile; the connections are handed over to
 * the loop's thread only when they are complete.
 *
 * Nothing prints or exits: errors go to the caller's buffer or come back
 * as -errno.  The sans-I/O rules (permits, path choice, failover,
 * reconnect bookkeeping) live in rtrs_clt_core.h. */
#ifndef XPRT_RTRS_CLT_H
#define XPRT_RTRS_CLT_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/uri.h"

struct rtrs_clt;

/* Request directions (as the server's rdma_ev sees them).  Identical
 * macro definitions may repeat in rtrs_srv.h. */
#define RTRS_READ	0
#define RTRS_WRITE	1
/* OR'ed into dir: send on the service connection (connection 0), as the
 * kernel's rnbd-client does with its session messages (RTRS_ADMIN_CON);
 * IO connections are 1..connections-1. */
#define RTRS_CLT_ADMIN	0x100

enum rtrs_mp_policy {
	RTRS_MP_RR,
	RTRS_MP_MIN_INFLIGHT,	/* the default, as the kernel */
	RTRS_MP_MIN_LATENCY,
};

/* Path states (the kernel's, less its transient CONNECTING_ERR/CLOSING):
 * CONNECTING while a (re)connection is under way, CONNECTED, RECONNECTING
 * while waiting for the next attempt, CLOSED when given up (attempts used
 * up, disconnected by hand, or a queue depth that changed). */
enum rtrs_clt_state {
	RTRS_CLT_CONNECTING,
	RTRS_CLT_CONNECTED,
	RTRS_CLT_RECONNECTING,
	RTRS_CLT_CLOSED,
};

enum rtrs_clt_link_ev {
	RTRS_CLT_LINK_EV_RECONNECTED,	/* a path is up again after all were down */
	RTRS_CLT_LINK_EV_DISCONNECTED,	/* the last connected path went down */
};

#define RTRS_CLT_RECONNECT_DELAY_MS	30000u	/* RNBD's RECONNECT_DELAY, 30 s */
#define RTRS_CLT_CONNECT_TIMEOUT_NS	30000000000ull	/* RTRS_CONNECT_TIMEOUT_MS */
#define RTRS_CLT_MAX_CONNECTIONS	4096u	/* the server's cid_num limit */

struct rtrs_clt_opts {
	const char *sessname;		/* no '/' or '.', 1..254 chars */
	uint32_t connections;		/* per path, connection 0 included; 0 = CPUs + 1 */
	enum rtrs_mp_policy policy;
	uint32_t reconnect_delay_ms;	/* plus 0..7 ms of jitter, as the kernel */
	int32_t max_reconnect_attempts;	/* -1 forever, 0 none (the path closes at
					 * its first reconnect), 1..9999 */
	uint32_t hb_interval_ms;	/* 0 = 5000 */
	uint32_t hb_missed_max;		/* 0 = 5 */
	uint64_t timeout_ns;		/* per connection handshake and INFO
					 * exchange; 0 = 30 s */
	/* How long requests wait while every path is down (none connected)
	 * before they fail with -ECONNABORTED, and new ones with them until
	 * a path is up again.  0, the default, is the kernel's rule: they
	 * fail at once.  RTRS_CLT_FOREVER: they wait for a path for ever (or
	 * until every path is closed). */
	uint64_t down_timeout_ns;
	/* The caller's stop flag (its SIGINT handler sets it), or NULL:
	 * rnbd_clt_open() and rnbd_clt_wait() give up with -EINTR once it is
	 * set.  Without it, an interrupted sleep goes on: a stop signal and
	 * SIGCONT (^Z, fg) interrupt epoll_wait too. */
	const volatile sig_atomic_t *stop;
};
#define RTRS_CLT_FOREVER UINT64_MAX
/* The defaults: CPUs + 1 connections, min-inflight, 30 s reconnect delay,
 * reconnect forever, kernel heartbeats, 30 s timeout, requests fail at
 * once while no path is connected. */
void rtrs_clt_opts_default(struct rtrs_clt_opts *o);

/* Opens the session: connects the paths one after the other (blocking,
 * each bounded by timeout_ns per connection) and succeeds when at least
 * one is connected; the others keep reconnecting in the background.
 * link_ev (may be NULL) runs from rtrs_clt_poll().  NULL + err, with errno:
 * EINVAL (options), ENOTCONN (no path could connect: err names each
 * path's failure), ENOMEM. */
struct rtrs_clt *rtrs_clt_open(const struct rtrs_clt_opts *o, const struct xuri *paths,
			       unsigned npaths,
			       void (*link_ev)(void *ctx, enum rtrs_clt_link_ev ev), void *ctx,
			       char *err, size_t errlen);
/* Closes every path (in-flight requests are confirmed with -ECONNABORTED
 * first) and frees the session.  NULL ok. */
void rtrs_clt_close(struct rtrs_clt *s);

/* Registers [addr, addr+len) for IO data on every path, now and on every
 * path that connects later.  Request data must lie in such memory (a read
 * request's buffer is written by the server).  0, -ENOMEM, -EINVAL, or the
 * registration's -errno with err filled. */
int rtrs_clt_add_mem(struct rtrs_clt *s, void *addr, size_t len, char *err, size_t errlen);
/* Deregisters the region that starts at addr (no request may use it any
 * more).  0 or -ENOENT. */
int rtrs_clt_del_mem(struct rtrs_clt *s, void *addr);

/* Queues one request; conf(priv, err) runs from rtrs_clt_poll() once the
 * server answered (err 0 or its -errno) or the request failed (-ENOTCONN
 * when every path is closed, -ECONNABORTED when every path was down for
 * down_timeout_ns).  dir: RTRS_READ (the server fills
 * data[0..datalen)) or RTRS_WRITE (data goes to the server), optionally |
 * RTRS_CLT_ADMIN.  usr (the upper protocol's header, usrlen bytes) is
 * copied now.  Returns 0, or at once:
 *   -EAGAIN    every buffer (permit) of the session is in use: poll first
 *   -ENOTCONN  every path is closed
 *   -ECONNABORTED  every path has been down for down_timeout_ns
 *   -EMSGSIZE  datalen > rtrs_clt_max_io() or usrlen too long for the header
 *   -EFAULT    data not in memory given to rtrs_clt_add_mem()
 * A request whose path fails is re-sent on a live path with the same
 * buffer id; while no path is connected it waits, for down_timeout_ns. */
int rtrs_clt_request(struct rtrs_clt *s, int dir, const void *usr, uint32_t usrlen,
		     void *data, uint32_t datalen, void (*conf)(void *priv, int err),
		     void *priv);

/* After every path was down, the server may have lost the session (a
 * restarted server, or one that timed the paths out): the layers above
 * must set themselves up again (each RNBD device re-opens) before the
 * requests that waited go out.  Each such user calls hold(s, true) once
 * (and hold(s, false) when it goes); at RTRS_CLT_LINK_EV_RECONNECTED the
 * requests that waited stay held -- RTRS_CLT_ADMIN requests still go out
 * -- until every user counted then has called rtrs_clt_resume(). */
void rtrs_clt_hold_on_reconnect(struct rtrs_clt *s, bool hold);
void rtrs_clt_resume(struct rtrs_clt *s);
/* Before it resumes, a user may go through the held requests: fn sees
 * each one's confirmation and its private pointer (to tell its own) and
 * its user header, which it may rewrite in place (a device the server
 * numbers differently now); a negative errno returned fails that request
 * with it (a device that is gone).  From rtrs_clt_poll()'s callbacks. */
void rtrs_clt_held_foreach(struct rtrs_clt *s,
			   int (*fn)(void *ctx, void (*conf)(void *priv, int err), void *priv,
				     void *usr, uint32_t usrlen),
			   void *ctx);

/* The loop. */
int rtrs_clt_fd(const struct rtrs_clt *s);	/* epoll fd: readable when poll has work */
/* Whether the stop flag of the options is set. */
bool rtrs_clt_stopping(const struct rtrs_clt *s);
/* 1: work is waiting, do not sleep; 0: armed. */
int rtrs_clt_arm(struct rtrs_clt *s);
/* Progress: completions, confirmations, heartbeats, reconnects.  Returns
 * how many things happened (0: nothing), never blocks except for the
 * brief join of a finished connector thread. */
int rtrs_clt_poll(struct rtrs_clt *s, uint64_t now_ns);
/* The caller's own epoll set, which holds rtrs_clt_fd(), just reported it
 * not ready: the next rtrs_clt_poll() need not ask which connections have
 * something to read (an epoll_wait of its own).  What arrives meanwhile
 * makes rtrs_clt_fd() readable for the caller's next epoll_wait. */
void rtrs_clt_quiet(struct rtrs_clt *s);
/* When rtrs_clt_poll() must run next at the latest (UINT64_MAX: never). */
uint64_t rtrs_clt_next_timer(const struct rtrs_clt *s);

/* Geometry, fixed by the first path that connected. */
uint32_t rtrs_clt_queue_depth(const struct rtrs_clt *s);
uint32_t rtrs_clt_max_io(const struct rtrs_clt *s);	/* min over the paths */
/* Requests queued or in flight. */
uint32_t rtrs_clt_inflight(const struct rtrs_clt *s);
/* Whether any path is CONNECTED / any is not CLOSED or was closed by
 * rtrs_clt_path_disconnect() (a reconnect may bring it back) / every one
 * is CLOSED (none reconnects by itself). */
bool rtrs_clt_connected(const struct rtrs_clt *s);
bool rtrs_clt_alive(const struct rtrs_clt *s);
bool rtrs_clt_all_closed(const struct rtrs_clt *s);
const char *rtrs_clt_sessname(const struct rtrs_clt *s);
enum rtrs_mp_policy rtrs_clt_policy(const struct rtrs_clt *s);
void rtrs_clt_set_policy(struct rtrs_clt *s, enum rtrs_mp_policy p);
/* A running session's settings, as the kernel's sysfs changes them
 * (max_reconnect_attempts: -1..9999, taken at the next attempt due;
 * down_timeout: counted from when the last path went, as at open). */
int32_t rtrs_clt_max_reconnect_attempts(const struct rtrs_clt *s);
void rtrs_clt_set_max_reconnect_attempts(struct rtrs_clt *s, int32_t n);
uint64_t rtrs_clt_down_timeout(const struct rtrs_clt *s);
void rtrs_clt_set_down_timeout(struct rtrs_clt *s, uint64_t ns);

/* Paths at run time.  idx is the position in the session's list (0..),
 * which shifts down when a path before it is removed. */
unsigned rtrs_clt_npaths(const struct rtrs_clt *s);
/* idx of the path to uri (canonical form compared), or -ENOENT. */
int rtrs_clt_path_find(const struct rtrs_clt *s, const struct xuri *uri);
/* Adds a path, last in the list, and starts connecting it on the
 * connector thread; returns at once, so IO and heartbeats on the other
 * paths go on meanwhile.  0, or -errno with err filled: -EEXIST (already a
 * path), -E2BIG (128 paths), -ENOMEM.  The path's state tells how it
 * went: CONNECTED, or CLOSED with last_error when its first connection
 * failed (no retry, as the kernel's add_path; remove it). */
int rtrs_clt_path_add(struct rtrs_clt *s, const struct xuri *uri, char *err, size_t errlen);
/* Removes a path; its in-flight requests fail over first.  -ENOENT. */
int rtrs_clt_path_remove(struct rtrs_clt *s, unsigned idx);
/* Closes a path's connections and keeps it CLOSED (no reconnect). */
int rtrs_clt_path_disconnect(struct rtrs_clt *s, unsigned idx);
/* Reconnects now, resetting the attempt count (a CONNECTED path is torn
 * down first).  Asynchronous: the state says when it is back. */
int rtrs_clt_path_reconnect(struct rtrs_clt *s, unsigned idx);

struct rtrs_clt_path_stats {
	char uri[300];			/* canonical */
	enum rtrs_clt_state state;
	int64_t cur_latency_ns;		/* last heartbeat round trip, -1 none */
	uint64_t reads, read_bytes, writes, write_bytes;
	uint32_t inflight;
	uint64_t failovers;		/* requests this path took over */
	uint64_t reconnects_ok, reconnects_failed;
	uint64_t stray_responses;	/* for no request in flight: ignored */
	uint32_t connections;
	uint32_t reconnect_attempts;	/* since the path was last up */
	uint16_t recon_cnt;		/* as sent in conn_req */
	char last_error[256];		/* why it last went down / failed, "" none */
};
int rtrs_clt_path_stats(const struct rtrs_clt *s, unsigned idx, struct rtrs_clt_path_stats *st);
/* A path's state alone (RTRS_CLT_CLOSED past the last): cheap enough for
 * every turn of a loop. */
enum rtrs_clt_state rtrs_clt_path_state(const struct rtrs_clt *s, unsigned idx);
void rtrs_clt_reset_stats(struct rtrs_clt *s);

const char *rtrs_clt_state_str(enum rtrs_clt_state st);	/* "connected", ... */
const char *rtrs_mp_policy_str(enum rtrs_mp_policy p);		/* "min-inflight", ... */
/* "rr"/"round-robin", "min-inflight"/"mi", "min-latency"/"ml" (the kernel's
 * sysfs words): 0 or -EINVAL. */
int rtrs_mp_policy_parse(const char *s, enum rtrs_mp_policy *p);

#endif
