/* The sans-I/O heart of the RTRS client (rtrs_clt.h): permits, the
 * request table, multipath selection, failover and reconnect bookkeeping,
 * following the kernel's rtrs-clt.c.  It owns no connection: posting a
 * request and starting a connection are calls into `ops`, and the I/O
 * layer tells it what happened (a response, a path down, a path up, a
 * connect failure), so every rule here is unit-tested with a fake
 * transport (tests/unit/test_rtrs_clt.c).
 *
 * Rules (the kernel's rtrs-clt.c):
 *   - permits are session-wide: buffer id i names chunk i on every path,
 *     and the lowest free id is handed out (find_first_zero_bit);
 *   - a request goes to a CONNECTED path chosen by the policy, trying each
 *     path at most once (the kernel's path_it with its skip list):
 *       RR            the path after the one used last, in list order
 *       MIN_INFLIGHT  fewest requests in flight (ties: list order)
 *       MIN_LATENCY   smallest heartbeat round trip (none measured = 0)
 *   - a path that fails hands its in-flight requests to a live path, same
 *     buffer id, counted as failovers of the path that takes them; with no
 *     live path they wait (held) until one comes up;
 *   - a failed path reconnects after reconnect_delay_ms + 0..7 ms; when
 *     its attempt is due and max_reconnect_attempts (>= 0) are used up it
 *     is CLOSED instead; a successful connection resets the count;
 *   - when every path is CLOSED (or none is left), held and new requests
 *     fail with -ENOTCONN;
 *   - when every path is down (none CONNECTED) for down_timeout_ns, held
 *     requests fail with -ECONNABORTED, and so does every new one until a
 *     path is up again.  0 is the kernel's rule (rtrs_clt_request() and
 *     the failover of a dead path's requests fail at once when no path is
 *     connected); RTRS_CORE_FOREVER keeps them waiting.
 * Confirmations are never called from inside these functions: finished
 * requests wait on a queue that rtrs_core_deliver() empties (the client
 * calls it from rtrs_clt_poll()), so a request's conf never runs inside
 * rtrs_clt_request() or a path operation. */
#ifndef XPRT_RTRS_CLT_CORE_H
#define XPRT_RTRS_CLT_CORE_H

#include <stdbool.h>
#include <stdint.h>

#include "rtrs/rtrs_clt.h"

#define RTRS_CORE_NONE	UINT32_MAX
#define RTRS_CORE_FOREVER UINT64_MAX
#define RTRS_RECONNECT_JITTER_MS 8u	/* RTRS_RECONNECT_SEED: 0..7 ms added */

struct rtrs_cpath;

struct rtrs_creq {
	uint32_t id;			/* the permit: server buffer id */
	bool in_use;
	bool held;			/* waiting for a path */
	bool done;			/* on the done queue */
	bool failed_over;		/* held after its path failed */
	int dir;			/* RTRS_READ / RTRS_WRITE, | RTRS_CLT_ADMIN */
	int err;			/* for the done queue */
	void *data;
	uint32_t datalen;
	uint32_t usrlen;		/* the user header sits in the client's iu arena */
	void (*conf)(void *priv, int err);
	void *priv;
	struct rtrs_cpath *path;	/* in flight there; NULL otherwise */
	uint32_t next;			/* held / done queue link */
	uint64_t t0;			/* submit time */
};

struct rtrs_cpath {
	enum rtrs_clt_state state;
	uint32_t inflight;
	int64_t latency_ns;		/* heartbeat round trip, -1 none */
	uint32_t attempts;		/* reconnect attempts since last up */
	uint64_t due_ns;		/* RECONNECTING: when the next attempt starts */
	bool established;		/* counted in paths_up */
	bool ever_up;
	bool by_request;		/* CLOSED by a disconnect: a reconnect may
					 * follow, so the session is not given up */
	uint64_t reads, read_bytes, writes, write_bytes;
	uint64_t failovers, reconnects_ok, reconnects_failed;
};

struct rtrs_core_ops {
	/* Post r on p (p is CONNECTED).  0, or -errno: the core tries the
	 * next path, and holds r when none takes it. */
	int (*post)(void *ctx, struct rtrs_cpath *p, struct rtrs_creq *r);
	/* Start (re)connecting p (the core set it CONNECTING); the I/O layer
	 * answers later with rtrs_core_path_up() or _connect_failed(). */
	void (*connect)(void *ctx, struct rtrs_cpath *p, uint64_t now);
	void (*link_ev)(void *ctx, enum rtrs_clt_link_ev ev);	/* may be NULL */
};

struct rtrs_core {
	const struct rtrs_core_ops *ops;
	void *ctx;
	enum rtrs_mp_policy policy;
	uint32_t reconnect_delay_ms;
	int32_t max_attempts;		/* -1 forever */
	struct rtrs_cpath **paths;
	unsigned npaths, cap;
	int rr_last;			/* index of the path RR used last, -1 none */
	unsigned paths_up;
	bool was_down;			/* DISCONNECTED sent, RECONNECTED owed */
	uint64_t down_timeout_ns;	/* RTRS_CORE_FOREVER (init's) or a bound */
	uint64_t down_since_ns;		/* when the last connected path went */
	bool down_failing;		/* the bound passed: requests fail */
	unsigned hold_users;		/* layers above that re-open at RECONNECTED */
	unsigned gate_pending;		/* of them, those still to resume */
	bool gated;			/* held requests wait for rtrs_core_resume() */
	unsigned pending_ev;		/* link events to deliver, bit per event */
	/* permits and requests, once the queue depth is known */
	uint32_t depth, used;
	uint64_t *map;
	struct rtrs_creq *reqs;
	uint32_t held_head, held_tail, nheld;
	uint32_t done_head, done_tail;
	uint64_t rng;
};

/* 0 or -ENOMEM (a table of 128 paths). */
int rtrs_core_init(struct rtrs_core *c, const struct rtrs_core_ops *ops, void *ctx,
		   enum rtrs_mp_policy policy, uint32_t reconnect_delay_ms, int32_t max_attempts,
		   uint64_t seed);
/* The queue depth: permits and request slots.  Once.  0, -EINVAL, -ENOMEM. */
int rtrs_core_set_depth(struct rtrs_core *c, uint32_t depth);
void rtrs_core_fini(struct rtrs_core *c);

/* --- permits: the lowest free buffer id, or RTRS_CORE_NONE ----------- */
uint32_t rtrs_permit_get(struct rtrs_core *c);
/* The same for IO, which never takes the last one (a queue depth of 1
 * aside): that one is for session messages (an RNBD re-open). */
uint32_t rtrs_permit_get_io(struct rtrs_core *c);
void rtrs_permit_put(struct rtrs_core *c, uint32_t id);

/* --- paths ------------------------------------------------------------ */
/* Appends p (state as set by the caller).  0, -E2BIG (128 paths). */
int rtrs_core_add_path(struct rtrs_core *c, struct rtrs_cpath *p);
/* Takes p out of the list (the caller closed it first, see
 * rtrs_core_path_down); -ENOENT. */
int rtrs_core_remove_path(struct rtrs_core *c, struct rtrs_cpath *p);
int rtrs_core_path_index(const struct rtrs_core *c, const struct rtrs_cpath *p);

/* The next path for a request under the policy, as the kernel's path
 * iterator: call with *tried = 0 and skip = {0}, then again after a post
 * failed.  NULL when every CONNECTED path was tried. */
struct rtrs_core_it {
	unsigned tried;
	uint64_t skip[2];		/* 128 paths */
};
struct rtrs_cpath *rtrs_core_next_path(struct rtrs_core *c, struct rtrs_core_it *it);

/* --- requests --------------------------------------------------------- */
/* r (from rtrs_core_req(c, permit), filled) goes to a path now or is held.
 * 0, or (r untouched: the caller returns its permit) -ENOTCONN when every
 * path is CLOSED, -ECONNABORTED when every path has been down for longer
 * than down_timeout_ns. */
int rtrs_core_submit(struct rtrs_core *c, struct rtrs_creq *r, uint64_t now);
static inline struct rtrs_creq *rtrs_core_req(struct rtrs_core *c, uint32_t id)
{
	return id < c->depth ? &c->reqs[id] : 0;
}
/* The server answered request msg_id on p.  0, or -EPROTO when no such
 * request is in flight on p (the kernel WARNs; the caller closes the
 * path). */
int rtrs_core_complete(struct rtrs_core *c, struct rtrs_cpath *p, uint32_t msg_id, int err);
/* Retries held requests on the connected paths; the number sent. */
unsigned rtrs_core_kick(struct rtrs_core *c, uint64_t now);
/* Calls the confirmations of finished requests (permits returned first, so
 * a confirmation may submit again) and the link events; how many. */
unsigned rtrs_core_deliver(struct rtrs_core *c);
/* After all paths were down and one is up again (RECONNECTED), with
 * hold_users > 0, the requests that waited stay held -- only
 * RTRS_CLT_ADMIN requests go out -- until every one of those users (an
 * RNBD device each) has set itself up again on the server and called
 * this. */
void rtrs_core_resume(struct rtrs_core *c);
/* Calls fn for each held request, in order; one for which fn returns a
 * negative errno is finished with it (its confirmation follows from
 * rtrs_core_deliver()), the others keep their place.  The layer above
 * fails or readdresses (its header rewritten in place) the requests of a
 * device that its re-open found gone or renumbered. */
void rtrs_core_held_foreach(struct rtrs_core *c, int (*fn)(void *ctx, struct rtrs_creq *r),
			    void *ctx);
/* Requests in flight or held. */
uint32_t rtrs_core_busy(const struct rtrs_core *c);

/* --- path events ------------------------------------------------------ */
/* p's connections are gone (the I/O layer tore them down): its in-flight
 * requests fail over, and it goes RECONNECTING (reconnect) or CLOSED. */
void rtrs_core_path_down(struct rtrs_core *c, struct rtrs_cpath *p, bool reconnect,
			 uint64_t now);
/* p is connected (INFO exchange done): CONNECTED, held requests go out. */
void rtrs_core_path_up(struct rtrs_core *c, struct rtrs_cpath *p, uint64_t now);
/* A (re)connection attempt failed; close_it: do not retry (e.g. the queue
 * depth changed). */
void rtrs_core_connect_failed(struct rtrs_core *c, struct rtrs_cpath *p, bool close_it,
			      uint64_t now);
/* Manual reconnect: attempts reset, due now.  -EBUSY while CONNECTING. */
int rtrs_core_path_reconnect(struct rtrs_core *c, struct rtrs_cpath *p, uint64_t now);
/* Starts the reconnects that are due (or closes the paths that used up
 * their attempts), and fails the held requests once every path has been
 * down for down_timeout_ns; the number of paths and requests touched. */
unsigned rtrs_core_timers(struct rtrs_core *c, uint64_t now);
/* The earliest reconnect or down_timeout due, UINT64_MAX if none. */
uint64_t rtrs_core_next_timer(const struct rtrs_core *c);

bool rtrs_core_any_connected(const struct rtrs_core *c);
bool rtrs_core_all_closed(const struct rtrs_core *c);
/* Whether the session is not given up: a path not CLOSED, or one CLOSED
 * by request (a reconnect may bring it back). */
bool rtrs_core_alive(const struct rtrs_core *c);

#endif
