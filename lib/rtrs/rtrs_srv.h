/* RTRS server engine: sessions of paths of connections, byte-compatible
 * with the Linux kernel's rtrs-client over rdma:// and carried the same way
 * over tcp:// (doc/rtrs-design.md "Server engine"; seed 002).
 *
 * A session (the kernel's struct rtrs_srv) is what a client's paths_uuid
 * names: it owns queue_depth chunks of chunk_size bytes, one anonymous
 * mapping shared by all its paths.  A path (sess_uuid) is cid_num
 * connections, connection 0 the service connection; each path registers the
 * session's chunks in its own domain and announces their keys in INFO_RSP.
 * A request is the client's RDMA WRITE WITH IMM into chunk `buf_id`; the
 * layer above sees it through rdma_ev() and answers with rtrs_srv_resp().
 *
 * Single-threaded and poll-driven like xrc: the caller owns the loop, sleeps
 * on rtrs_srv_fd() after rtrs_srv_arm() returned 0 (at most until
 * rtrs_srv_next_timer()), and calls rtrs_srv_poll(now) whenever it wakes.
 * Callbacks run only inside rtrs_srv_poll() (seed 002's midlayer rule).
 * Nothing prints or exits: errors go to the caller's buffer or come back as
 * -errno; what happens to paths (closed, and why) is logged at info level.
 *
 * Rules enforced exactly as the kernel (doc/rtrs-design.md "Rules the
 * server enforces"): a bad conn_req is rejected with a conn_rsp carrying
 * its errno (-ECONNRESET for a malformed one, -ENXIO, -EEXIST, -EACCES);
 * a protocol violation on an established path closes that path only. */
#ifndef XPRT_RTRS_SRV_H
#define XPRT_RTRS_SRV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/uri.h"

struct rtrs_srv;
struct rtrs_srv_sess;
struct rtrs_srv_op;

/* Request directions, as the kernel's READ/WRITE (identical definitions
 * may repeat in rtrs_clt.h). */
#define RTRS_READ	0
#define RTRS_WRITE	1

/* How long a path may stay connecting (connections accepted, no INFO_REQ
 * yet) before it is closed: the kernel's zombie-path rule. */
#define RTRS_SRV_CONNECT_TIMEOUT_NS	30000000000ull

struct rtrs_srv_opts {
	uint32_t queue_depth;		/* 0 = 512; 1..65535 */
	uint32_t chunk_size;		/* 0 = 128 KiB; rtrs_check_geometry() */
	bool always_invalidate;		/* one key per chunk, replaced on every request */
	uint32_t hb_interval_ms;	/* 0 = 5000 */
	uint32_t hb_missed_max;		/* 0 = 5 */
	/* Who may connect: NULL lets anyone in.  Called with sessname NULL
	 * when a connection request arrives (return 0 when the peer may still
	 * be allowed once its session name is known) and again with the name
	 * from INFO_REQ.  0, or -EACCES to refuse (the request is rejected
	 * with it, or the path closed). */
	int (*allow)(void *ctx, const char *peer_addr, const char *sessname);
	void *allow_ctx;		/* allow's ctx (NULL: rtrs_srv_new's ctx) */
};

/* The kernel's defaults, always_invalidate on. */
void rtrs_srv_opts_default(struct rtrs_srv_opts *o);

enum rtrs_srv_ev {
	RTRS_SRV_SESS_UP,	/* its first path finished the INFO exchange */
	RTRS_SRV_SESS_DOWN,	/* its last established path is gone */
};

struct rtrs_srv_ops {
	/* Session lifetime.  UP may return -errno to refuse the session (the
	 * path that brought it up is closed). */
	int (*sess_ev)(void *ctx, struct rtrs_srv_sess *s, enum rtrs_srv_ev ev);
	/* One request.  dir RTRS_READ: fill data[0..datalen) (datalen is the
	 * size of the client's buffer, 0 when it gave none); RTRS_WRITE: data
	 * holds datalen bytes.  usr is the user header (the RNBD message),
	 * usrlen bytes.  Return 0 and call rtrs_srv_resp(op, err) now or later
	 * (from the loop's thread; data stays valid until then), or -errno to
	 * have the engine answer with it now. */
	int (*rdma_ev)(void *ctx, struct rtrs_srv_sess *s, struct rtrs_srv_op *op, int dir,
		       void *data, uint32_t datalen, const void *usr, uint32_t usrlen);
};

/* NULL + err (bad geometry, out of memory). */
struct rtrs_srv *rtrs_srv_new(const struct rtrs_srv_opts *o, const struct rtrs_srv_ops *ops,
			      void *ctx, char *err, size_t errlen);
/* Listens on tcp:// or rdma:// (port 0 picks a free one).  Returns the
 * listener's index, or -errno with err ("rdma://...: no RDMA device ..."). */
int rtrs_srv_listen(struct rtrs_srv *srv, const struct xuri *u, char *err, size_t errlen);
unsigned rtrs_srv_listeners(const struct rtrs_srv *srv);
/* The listener's URI with its bound port. */
const struct xuri *rtrs_srv_listener_uri(const struct rtrs_srv *srv, unsigned idx);

/* An epoll fd covering every listener and connection. */
int rtrs_srv_fd(const struct rtrs_srv *srv);
/* Before sleeping on the fd: 1 when work is already waiting (poll again,
 * do not sleep), 0 when armed. */
int rtrs_srv_arm(struct rtrs_srv *srv);
/* Accepts connections, handles completions, heartbeats and timeouts.
 * Returns how many things it did (0: idle), or -errno for a fatal error
 * of a listener. */
int rtrs_srv_poll(struct rtrs_srv *srv, uint64_t now_ns);
/* The next deadline (monotonic ns) at which rtrs_srv_poll() has timer work;
 * UINT64_MAX when none. */
uint64_t rtrs_srv_next_timer(const struct rtrs_srv *srv);
/* Closes every path and listener; sessions get SESS_DOWN.  NULL ok.  Every
 * op handed out must have been answered. */
void rtrs_srv_free(struct rtrs_srv *srv);

/* Answers a request: err 0 or -errno (its low 9 bits go on the wire).  For
 * a READ with err 0 the data goes to the client first.  0, or -ENOTCONN
 * when the path went away meanwhile (the op is released all the same). */
int rtrs_srv_resp(struct rtrs_srv_op *op, int err);
struct rtrs_srv_sess *rtrs_srv_op_sess(const struct rtrs_srv_op *op);
/* Answers given between rtrs_srv_batch(srv, true) and (srv, false) are
 * held and go out together, one send per connection (tcp: one sendmsg
 * for the batch instead of one per answer); rtrs_srv_poll() batches what
 * it answers by itself. */
void rtrs_srv_batch(struct rtrs_srv *srv, bool on);

/* --- sessions, for the layer above and for `status` -------------------- */

void rtrs_srv_sess_set_priv(struct rtrs_srv_sess *s, void *priv);
void *rtrs_srv_sess_priv(const struct rtrs_srv_sess *s);
/* The session name from INFO_REQ ("" before the first one). */
const char *rtrs_srv_sess_name(const struct rtrs_srv_sess *s);
uint32_t rtrs_srv_sess_queue_depth(const struct rtrs_srv_sess *s);

/* Iteration: NULL starts, NULL ends.  Only between polls. */
struct rtrs_srv_sess *rtrs_srv_sess_next(const struct rtrs_srv *srv,
					 const struct rtrs_srv_sess *prev);

struct rtrs_srv_stats {
	uint64_t reads, read_bytes;	/* READ requests, bytes sent to the client */
	uint64_t writes, write_bytes;	/* WRITE requests, data bytes received */
	uint32_t inflight;		/* requests the layer above has not answered */
	uint64_t chunk_waits;		/* requests that waited for their chunk: a
					 * copy the client failed over while the
					 * server still worked on the first */
};

enum rtrs_srv_path_state {
	RTRS_SRV_CONNECTING,	/* connections arriving, no INFO_REQ yet */
	RTRS_SRV_CONNECTED,
	RTRS_SRV_CLOSING,	/* closed, waiting for its requests to be answered */
};
const char *rtrs_srv_path_state_str(enum rtrs_srv_path_state st);

struct rtrs_srv_path_info {
	enum rtrs_srv_path_state state;
	char sessname[256];
	uint8_t sess_uuid[16];
	char peer[64];			/* "ADDR:PORT" of connection 0's client end */
	const char *transport;		/* "rdma" or "tcp" */
	unsigned listener;		/* index of the listener it came through */
	uint16_t cid_num, cid_up;	/* connections asked for / accepted */
	uint16_t recon_cnt;
	int64_t hb_latency_ns;		/* heartbeat round trip, -1 none yet */
	uint64_t up_ns;			/* when it became CONNECTED, 0 if not */
	struct rtrs_srv_stats stats;
};

/* Paths of a session (every state), in arrival order. */
unsigned rtrs_srv_sess_paths(const struct rtrs_srv_sess *s);
/* 0, or -ENOENT when idx is out of range. */
int rtrs_srv_path_get(const struct rtrs_srv_sess *s, unsigned idx, struct rtrs_srv_path_info *pi);
/* Closes path idx of s, as the kernel's sysfs disconnect: its requests
 * are answered first, the client sees the path fail and reconnects it.
 * 0, -ENOENT, -EALREADY (closing already).  Between polls. */
int rtrs_srv_path_disconnect(struct rtrs_srv_sess *s, unsigned idx);

struct rtrs_srv_info {
	uint32_t queue_depth, chunk_size, max_io_size;
	bool always_invalidate;
	unsigned sessions, paths;
	uint64_t rejected;		/* connection requests refused */
	uint64_t closed;		/* paths closed for a fault or a rule */
	uint64_t dropped;		/* connections the listeners dropped before a request */
};
void rtrs_srv_get_info(const struct rtrs_srv *srv, struct rtrs_srv_info *in);

#endif
