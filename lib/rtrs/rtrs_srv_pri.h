/* Inside the RTRS server engine: the objects rtrs_srv.c (sessions, paths,
 * connection setup, the loop) and rtrs_srv_io.c (requests, responses,
 * heartbeats) share.  Not for users of rtrs_srv.h. */
#ifndef XPRT_RTRS_SRV_PRI_H
#define XPRT_RTRS_SRV_PRI_H

#include "rtrs/rtrs_hb.h"
#include "rtrs/rtrs_srv.h"
#include "rtrs/rtrs_wire.h"
#include "core/xtime.h"
#include "xprt/xrc.h"

#define SRV_MAX_LISTENERS	16
#define SRV_WC_BATCH		32
#define SRV_LISTEN_CHECK_NS	100000000ull	/* listeners asked unprompted: half-open deadlines */
/* Paths before INFO_REQ, server-wide (srv_admit).  Each holds its
 * session's chunk mapping (64 MiB of address space by default) and, from
 * its first connection, a region and a window per chunk.  A client's path
 * is in this state until all its connections (one per CPU and one more)
 * are up and it sent INFO_REQ: a round trip or two, longer when many
 * clients come at once (a reconnect storm after a server restart).  At
 * the bound, a path connecting for longer than the grace gives way to a
 * newcomer; when none has, the newcomer is refused (-EAGAIN: a client
 * that already had the path reconnects later; a new one may try again). */
#define SRV_CONNECTING_MAX	256
#define SRV_CONNECTING_GRACE_NS	(5 * XTIME_NS_PER_S)

/* wr_id of our signaled sends: the kind in the top byte, and how many
 * send-queue slots the completion gives back in the low 32 bits (an RC send
 * queue completes in order, so a signaled completion frees every slot
 * posted before it). */
enum wr_kind { WR_RSP = 1, WR_HB, WR_INFO, WR_BIND };
#define WR_ID(kind, n)		((uint64_t)(kind) << 56 | (uint32_t)(n))
#define WR_SLOTS(id)		((uint32_t)(id))

struct srv_path;

/* One request from its arrival until its response is posted. */
struct rtrs_srv_op {
	struct srv_path *path;
	struct srv_con *con;		/* where it arrived, where it is answered */
	struct rtrs_srv_op *next;	/* in con->wait, path->bindq/bound or
					 * sess->parked */
	uint32_t buf_id;
	uint32_t off;			/* where its message is in the chunk */
	int dir;			/* RTRS_READ / RTRS_WRITE */
	uint32_t datalen;		/* the data's length */
	const uint8_t *usr;		/* the layer above's message, in the chunk */
	uint16_t usr_len;
	int err;			/* the answer, once given */
	bool busy;			/* between arrival and response (or
					 * until dropped, parked on a path
					 * that closed) */
	bool waiting;			/* answered, queued for send-queue room */
	struct rtrs_rdma_read rd;	/* READ: flags, sg_cnt, the client's buffer */
};

struct srv_con {
	struct srv_path *path;
	struct xrc *x;
	uint16_t cid;
	bool epoll_out;			/* registered for EPOLLOUT (tcp backlog) */
	uint32_t sq_cap, sq_used;	/* our own count of send-queue slots */
	uint32_t sq_unsig;		/* posted since the last signaled one */
	uint64_t remote_errors;		/* xrc's count when last looked at */
	struct rtrs_srv_op *wait, **wait_tail;	/* answers waiting for room */
	bool held;			/* posts made with XRC_MORE, not flushed */
};

struct srv_chunk_key {			/* always_invalidate: per chunk, per path */
	struct xrc_mr *mr;		/* the chunk alone (rxe checks windows
					 * against the region's bounds) */
	struct xrc_win *win;
};

struct srv_path {
	struct rtrs_srv_sess *sess;
	struct srv_path *next;		/* in sess->paths */
	enum rtrs_srv_path_state state;
	uint8_t sess_uuid[16];
	char sessname[RTRS_NAME_MAX + 1];
	char peer[64];			/* first connection's "ADDR:PORT" */
	char peer_host[64];		/* its address alone: the -EEXIST rule */
	char local_host[256];		/* the address the client connected to */
	unsigned listener;
	enum xuri_scheme scheme;
	uint16_t cid_num, cid_up, recon_cnt;
	bool established;		/* counted in sess->paths_up */
	bool info_pending;		/* INFO_RSP waits for connection 0 */
	bool torn;			/* transport side released (closing) */
	uint32_t bind_next;		/* always_invalidate: chunks bound so far */
	/* always_invalidate: requests waiting for their chunk's new key
	 * (bindq), and those whose binds are posted on connection 0 (bound,
	 * dispatched when the batch completes) */
	struct rtrs_srv_op *bindq, **bindq_tail, *bound, **bound_tail;
	uint32_t info_len;
	struct srv_con **con;		/* cid_num entries */
	struct xrc_dom *dom;
	struct xrc_mr *chunks_mr;	/* always_invalidate off: all chunks */
	struct srv_chunk_key *keys;	/* always_invalidate on: queue_depth */
	uint8_t *ctl;			/* INFO_REQ receive + INFO_RSP send */
	size_t ctl_len;
	struct xrc_mr *ctl_mr;
	struct rtrs_srv_op *ops;	/* queue_depth, indexed by buf_id */
	struct rtrs_hb hb;
	uint64_t created_ns, up_ns;
	const char *why;		/* why it is closing (for the log) */
	char why_buf[RTRS_NAME_MAX + 64];	/* a why that names something */
	struct rtrs_srv_stats st;
};

struct rtrs_srv_sess {
	struct rtrs_srv *srv;
	struct rtrs_srv_sess *next;
	uint8_t paths_uuid[16];
	char sessname[RTRS_NAME_MAX + 1];
	uint8_t *chunks;		/* queue_depth * chunk_size, anonymous */
	size_t chunks_len;
	/* queue_depth: the request working in chunk i, of whichever path;
	 * requests that arrived on another path meanwhile wait in parked
	 * (rtrs_srv_io.c, "Chunks and failover") */
	struct rtrs_srv_op **holder;
	struct rtrs_srv_op *parked;
	struct srv_path *paths;
	unsigned npaths, paths_up;
	bool dying;			/* no live path left: not joinable */
	void *priv;
};

struct srv_listener {
	struct xrc_listener *l;
	struct xuri uri;		/* with the bound port */
	bool ready;			/* its fd showed readable */
};

struct rtrs_srv {
	struct rtrs_srv_opts o;
	struct rtrs_srv_ops ops;
	void *ctx;
	int epfd;
	struct srv_listener lsn[SRV_MAX_LISTENERS];
	unsigned nlsn;
	struct rtrs_srv_sess *sessions;
	uint64_t now;
	uint64_t lsn_ns;		/* listeners last asked regardless */
	unsigned connecting;		/* paths in RTRS_SRV_CONNECTING */
	bool reap;			/* a path is closing: tidy up in the loop */
	bool unpark;			/* a chunk a parked request waits for is free */
	bool in_poll;			/* inside rtrs_srv_poll: answers are held
					 * (XRC_MORE) and flushed once per batch */
	uint64_t rejected, closed;
};

/* rtrs_srv_core.c: sessions and paths, without I/O */
/* A connection request (its private data pd) from peer ("ADDR:PORT") to the
 * local address local ("" when unknown) on listener li: the path it joins
 * or starts, the session made where needed.  0 with *cr and *pp, or the
 * -errno to refuse it with (the kernel's) and why. */
int srv_admit(struct rtrs_srv *srv, unsigned li, const void *pd, size_t len, const char *peer,
	      const char *local, struct rtrs_conn_req *cr, struct srv_path **pp, const char **why);
/* Connection cid of p is up (c: the driver's). */
void srv_con_attached(struct srv_path *p, uint16_t cid, struct srv_con *c);
/* process_info_req's checks of INFO_REQ on connection cid of p: 0 with *m,
 * or -errno and why (the path is to be closed). */
int srv_info_admit(struct srv_path *p, uint16_t cid, const void *buf, uint32_t len,
		   struct rtrs_info_req *m, const char **why);
/* INFO_REQ accepted: p is connected under name. */
void srv_path_up(struct srv_path *p, const char *name, uint64_t now);
/* p closing (from any state; why NULL: no log line, not counted). */
void srv_path_close(struct srv_path *p, const char *why);
/* A closed path, its transport released, out of its session and freed.
 * Whether it was the session's last established path (the session goes
 * down). */
bool srv_path_unlink(struct srv_path *p);
/* Sessions without paths freed, those without a live path not joinable. */
void srv_tidy(struct rtrs_srv *srv);
bool srv_sess_live(const struct rtrs_srv_sess *s);
void srv_sess_free(struct rtrs_srv_sess *s);
/* The host part of "ADDR:PORT" / "[ADDR]:PORT". */
void srv_host_of(const char *peer, char *out, size_t len);
bool srv_wildcard(const char *host);
/* "xxxxxxxx-xxxx-..." for the log. */
const char *srv_uuid_str(const uint8_t u[16], char buf[37]);

/* rtrs_srv.c */
/* INFO_REQ arrived on c (connection 0, connecting): process_info_req. */
void srv_info_req(struct srv_con *c, const void *buf, uint32_t len);
uint32_t srv_chunk_size(const struct rtrs_srv *srv);

/* rtrs_srv_io.c */
/* One completion of connection c; c's path is CONNECTING or CONNECTED. */
void srv_io_wc(struct srv_con *c, const struct xrc_wc *wc);
/* Posts answers that waited for send-queue room or for the connection. */
void srv_io_flush_waiting(struct srv_con *c);
/* always_invalidate: posts the binds of waiting requests on connection 0
 * when its send queue is empty (see rtrs_srv_io.c). */
void srv_io_binds(struct srv_path *p);
/* Whether srv_io_binds() has something it could do now. */
bool srv_io_binds_ready(const struct srv_path *p);
/* Heartbeat tick of a connected path. */
void srv_io_hb(struct srv_path *p, uint64_t now);
/* always_invalidate: binds every chunk's window once (keys for INFO_RSP).
 * 0 or -errno. */
int srv_io_bind_all(struct srv_path *p);
/* Posts a response or queues it; for rtrs_srv_resp and rdma_ev errors. */
int srv_io_answer(struct rtrs_srv_op *op, int err);
/* op is done with its chunk (answered, or its path is going): not busy,
 * the chunk free for a request that waits for it. */
void srv_op_done(struct rtrs_srv_op *op);
/* Starts the parked requests whose chunks are free (srv->unpark). */
void srv_io_unpark(struct rtrs_srv *srv);
/* Before p's requests are freed: none holds a chunk or waits any more. */
void srv_io_forget(struct srv_path *p);

#endif
