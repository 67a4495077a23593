/* Reliable-connection (RC) service class: the verbs
 * model -- post work requests, poll completions -- with two backends:
 *
 *   rdma://  real RC queue pairs set up through librdmacm (xrc_rdma.c)
 *   tcp://   our framing over a TCP socket carrying the same operations;
 *            the receiver checks key and bounds before it applies a write
 *            or serves a read (xrc_tcp.c, framing in xrc_tcp_wire.h)
 *
 * Completion rules (seed 002, InfiniBand midlayer), in every
 * backend:
 *   - a completion is only ever returned by xrc_poll(); no post call
 *     completes anything or calls back into the caller;
 *   - one thread drives a connection at a time (the caller serialises
 *     post/poll on one struct xrc; different connections are independent);
 *   - nothing here blocks except xrc_connect(), xrc_accept() and
 *     xrc_wait(), each bounded by a timeout.
 *
 * Work requests complete in order per queue (send queue, receive queue),
 * as on an RC QP.  When a connection fails, every outstanding request
 * completes with status -ECONNRESET (the verbs "flush"), xrc_state() turns
 * XRC_DOWN and later posts fail with -ENOTCONN.
 *
 * The library never prints or exits: errors go to the caller's buffer.
 */
#ifndef XPRT_XRC_H
#define XPRT_XRC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/uri.h"

struct xrc;		/* one connection */
struct xrc_listener;
struct xrc_req;		/* an incoming connection request */
struct xrc_dom;		/* protection domain: where memory is registered */
struct xrc_mr;
struct xrc_win;		/* memory window: a rebindable remote key (below) */

/* CM private data carried by a connect request and by its accept/reject,
 * as rdma_cm does (RTRS puts its conn_req/conn_rsp there).  RoCE/IB limit
 * the REQ to 56 bytes; we allow that much on every backend. */
#define XRC_PRIV_MAX 56

struct xrc_opts {
	uint32_t sq_depth;	/* send queue: posted sends/writes/reads in flight (0: 128;
				 * rounded up to a power of two, as are rq_depth) */
	uint32_t rq_depth;	/* receive queue: posted receives (0: 128) */
	uint32_t max_send;	/* largest SEND payload, bytes (0: 64 KiB); a bigger
				 * incoming SEND is a protocol error that fails
				 * the connection */
	uint32_t max_inline;	/* sends up to this size may use XRC_INLINE (0: 64) */
	uint64_t timeout_ns;	/* connect/accept/address resolution (0: 5 s) */
	int cancel_fd;		/* > 0: a descriptor whose becoming readable
				 * gives up a connect under way (-ECANCELED):
				 * another thread's way to stop one early */
	uint8_t tos;		/* IP TOS / traffic class, 0 = default */
	uint32_t burst;		/* tcp: bytes read per xrc_poll() and written per
				 * xrc_poll()/xrc_flush() at most (0: 4 MiB); smaller
				 * keeps the caller responsive to its other
				 * connections (see xrc_flush) */
	uint32_t ack_delay_ns;	/* tcp: how long the ACK this end owes for the
				 * peer's WRITEs may wait for a frame of ours to
				 * ride with (0: it goes out with the poll that
				 * read them, a segment of its own when nothing
				 * else goes).  It goes at once when WRITEs of a
				 * quarter of the peer's send queue are owed, and in
				 * xrc_wait().  A caller that sets it calls
				 * xrc_poll() again by xrc_next_timer(), asleep or
				 * not (rdma: the device acknowledges; ignored) */
};
/* Depths up to 65536 each work on tcp; on rdma the device's max_qp_wr and
 * max_cqe bound them (rxe: sq_depth 4096 + rq_depth 2048 is tested, as an
 * RTRS IO connection needs queue_depth*4+1 sends).
 *
 * rdma connection parameters, compared with the kernel's RTRS (rtrs-clt.c
 * rtrs_rdma_route_resolved, rtrs-srv.c rtrs_rdma_do_accept): like it we
 * connect with retry_count 7 and rnr_retry_count 7 (retry for ever while the
 * peer has no receive posted) and accept with rnr_retry_count 7.  The kernel
 * asks for responder_resources = initiator_depth = 0 (RTRS never issues an
 * RDMA READ); we ask for the device's maximum (at most 16) so that
 * xrc_post_read() works between our own ends, and accept with what the
 * peer's request allows (so 0 against a kernel client).  The CM settles on
 * the smaller values, so either end talks to the kernel unchanged; only an
 * RDMA READ towards a kernel RTRS peer would fail (-EREMOTEIO), and RTRS
 * sends none. */

/* Access rights of a registered region, as in verbs. */
enum {
	XRC_ACCESS_LOCAL_WRITE	= 1,
	XRC_ACCESS_REMOTE_WRITE	= 2,
	XRC_ACCESS_REMOTE_READ	= 4,
};

/* A registered region.  `rkey` is what a peer names in xrc_post_write()/
 * xrc_post_read(); addresses on the wire are this process's virtual
 * addresses, as with verbs. */
struct xrc_mr {
	void *addr;
	size_t len;
	uint32_t lkey;
	uint32_t rkey;
	unsigned access;
};

struct xrc_sge {
	void *addr;
	uint32_t len;
	struct xrc_mr *mr;	/* rdma: required unless XRC_INLINE; tcp: may be NULL */
};

#define XRC_MAX_SGE 4
#define XRC_RECV_BATCH 16	/* receives one xrc_post_recvs() call takes at most */

enum xrc_op {
	XRC_OP_SEND,		/* our send completed (buffer is ours again) */
	XRC_OP_WRITE,		/* our RDMA write (with or without imm) completed */
	XRC_OP_READ,		/* our RDMA read completed: data is in our buffer */
	XRC_OP_RECV,		/* a SEND arrived in a posted receive */
	XRC_OP_RECV_IMM,	/* a peer's write-with-immediate landed; it consumed
				 * a posted receive (verbs rule), `len` = bytes written */
	XRC_OP_BIND,		/* our xrc_win_bind() or xrc_win_invalidate() completed */
};

/* Post flags. */
enum {
	XRC_SIGNALED	= 1,	/* produce a completion (otherwise only errors do,
				 * and the slot is freed when a later signaled
				 * request on the same queue completes) */
	XRC_INLINE	= 2,	/* the payload is copied at post time */
	XRC_FENCE	= 4,	/* wait for earlier reads to finish first */
	XRC_MORE	= 8,	/* more posts follow: the backend may hold this one
				 * back until a post without the flag, xrc_flush()
				 * or xrc_poll() (tcp: one sendmsg for a batch;
				 * rdma: one ibv_post_send, one doorbell, for a
				 * chain of up to 16 work requests, also sent
				 * before a bind, an arming or going down) */
};

struct xrc_wc {
	uint64_t wr_id;
	int status;		/* 0, or -errno: -ECONNRESET (flushed), -EREMOTEIO
				 * (the peer refused: bad rkey or bounds),
				 * -EMSGSIZE (receive buffer too small) */
	enum xrc_op op;
	uint32_t len;		/* RECV: bytes received; RECV_IMM: bytes written */
	uint32_t imm;		/* host order */
	bool has_imm;		/* RECV (send-with-imm) or RECV_IMM */
	bool has_inv;		/* RECV of a send-with-invalidate (xrc_post_send_inv) */
	uint32_t inv_rkey;	/* the key it named, when has_inv */
};

enum xrc_state { XRC_CONNECTING, XRC_UP, XRC_DOWN };

/* --- connection setup ------------------------------------------------- */

/* `u` is tcp:// or rdma:// (AUTO must be resolved first, see xaddr.h).
 * rdma:// with no RDMA device fails with "no RDMA device found (...)". */
struct xrc_listener *xrc_listen(const struct xuri *u, const struct xrc_opts *o,
				char *err, size_t errlen);
/* Readable when xrc_get_request() may return something. */
int xrc_listener_fd(const struct xrc_listener *l);
/* The bound address (port 0 in the URI picks a free one). */
uint16_t xrc_listener_port(const struct xrc_listener *l);
/* Non-blocking.  Returns the next complete request, or NULL: errno EAGAIN
 * when none is ready (a half-open or slow client never blocks this), other
 * errno values with a message in err for a fatal listener error.  Requests
 * that fail on their own (a client that sends garbage, or goes away) are
 * dropped silently here and counted. */
struct xrc_req *xrc_get_request(struct xrc_listener *l, char *err, size_t errlen);
const void *xrc_req_data(const struct xrc_req *r, size_t *len);
/* "ADDR:PORT" of the client. */
const char *xrc_req_peer(const struct xrc_req *r);
/* "ADDR:PORT" of ours it came to -- on a wildcard listener, the address
 * the client connected to. */
const char *xrc_req_local(const struct xrc_req *r);
/* Whether an rdma:// listener waits to listen again: its device went away
 * or its address moved (RDMA_CM_EVENT_DEVICE_REMOVAL, _ADDR_CHANGE), and
 * nothing will make its fd readable; each xrc_get_request() then tries,
 * once a second at most, so a caller that sleeps calls it at least that
 * often.  The listener keeps its address and port (port 0: the one picked
 * at first). */
bool xrc_listener_waiting(const struct xrc_listener *l);
/* Connections the listener dropped before their request was complete
 * (tcp: garbage, too slow, gone, or no room among the half-read ones;
 * rdma: 0, the CM keeps such connections from us). */
uint64_t xrc_listener_dropped(const struct xrc_listener *l);
/* Whether the device the request came in on has memory windows of the
 * kind (flags: 0 for type 1, XRC_WIN_TYPE2), as xrc_win_new() on its
 * connection would need: 0, or -EOPNOTSUPP with err "DEV has no type-1
 * memory windows".  A server refuses a connection it could not serve. */
int xrc_req_windows(const struct xrc_req *r, unsigned flags, char *err, size_t errlen);
/* Accepts with `priv` (<= XRC_PRIV_MAX bytes, may be NULL) as the reply's
 * private data; frees r.  Never waits for the peer: returns a connection
 * that is XRC_UP (tcp) or still XRC_CONNECTING (rdma: xrc_poll() turns it
 * XRC_UP when the handshake completes, XRC_DOWN when it does not within
 * o->timeout_ns; receives may be posted meanwhile, sends may not), or NULL
 * + err. */
struct xrc *xrc_accept(struct xrc_req *r, const void *priv, size_t privlen,
		       const struct xrc_opts *o, char *err, size_t errlen);
/* Rejects with private data; frees r. */
void xrc_reject(struct xrc_req *r, const void *priv, size_t privlen);
void xrc_listener_close(struct xrc_listener *l);	/* NULL ok */

/* Blocking, bounded by o->timeout_ns.  On success *replen gets the accept's
 * private data length (rep may be NULL).  Failure messages name the
 * endpoint: "tcp://127.0.0.1:7 : connection refused",
 * "...: rejected by peer" (errno ECONNREFUSED; the reject's private data
 * is still copied to rep and *replen), "...: timed out". */
struct xrc *xrc_connect(const struct xuri *u, const struct xrc_opts *o,
			const void *priv, size_t privlen, void *rep, size_t *replen,
			char *err, size_t errlen);
void xrc_close(struct xrc *c);		/* NULL ok; flushes, frees */
/* As xrc_close(), but nothing posted goes out any more, as when a QP is
 * destroyed (tcp: what the socket still holds is dropped, the peer gets
 * a reset at once instead of the rest and then a FIN). */
void xrc_abort(struct xrc *c);		/* NULL ok */

enum xrc_state xrc_state(const struct xrc *c);
enum xuri_scheme xrc_scheme(const struct xrc *c);
/* "ADDR:PORT" of the other end. */
const char *xrc_peer(const struct xrc *c);
/* Effective limits after negotiation with the peer. */
uint32_t xrc_max_send(const struct xrc *c);
uint32_t xrc_sq_depth(const struct xrc *c);
/* Receives that may be posted at once (rq_depth, or less where the
 * device allows less). */
uint32_t xrc_rq_depth(const struct xrc *c);
/* Sends up to this many bytes may be posted with XRC_INLINE. */
uint32_t xrc_max_inline(const struct xrc *c);
/* Gather entries per post (XRC_MAX_SGE, or less where the device allows
 * less). */
uint32_t xrc_max_sge(const struct xrc *c);

/* What an RDMA device allows one connection (ibv_device_attr). */
struct xrc_dev_caps {
	uint32_t max_qp_wr, max_cqe, max_sge;
};
/* Fits o's depths to a device, as the kernel's RTRS fits its work
 * requests to max_qp_wr: each depth at most max_qp_wr, and the CQ, which
 * takes sq_depth + rq_depth + 1, at most max_cqe (the larger depth halved
 * first); depths stay powers of two.  *sge: XRC_MAX_SGE, or max_sge if
 * fewer.  True when anything was cut. */
bool xrc_opts_fit(struct xrc_opts *o, const struct xrc_dev_caps *d, uint32_t *sge);

/* --- memory ------------------------------------------------------------ */

/* The domain the connection's memory lives in.  Connections on the same
 * RDMA device share one domain (and so keys); all tcp connections of the
 * process share one. */
struct xrc_dom *xrc_domain(struct xrc *c);
/* NULL + err on failure (e.g. RLIMIT_MEMLOCK with rdma). */
struct xrc_mr *xrc_reg(struct xrc_dom *d, void *addr, size_t len, unsigned access,
		       char *err, size_t errlen);
/* NULL ok.  The caller must have no request in flight that uses it, and
 * no window bound over it (invalidate or free those first: rdma devices
 * refuse to deregister memory under a bound window, IBA 10.6.7.2.6, and the
 * registration then leaks; tcp invalidates such windows here). */
void xrc_dereg(struct xrc_mr *mr);

/* --- memory windows ------------------------------------------------------
 * A window is a remote key that can be moved over (part of) a registered
 * region and replaced cheaply, without registering memory again: the verbs
 * memory window, which RTRS's always_invalidate server needs (one key per
 * chunk, replaced on every request).  The key changes on every bind; the
 * previous key is dead once the bind has executed.
 *
 * Two kinds, as in verbs:
 *   type 1 (default): the key works for RDMA writes and reads arriving on
 *     ANY connection of the window's domain -- RTRS shares its chunk keys
 *     over all connections of a path and of a session -- also after the
 *     connection it was bound through is gone.  On rdma a peer cannot
 *     invalidate it (IBA o10-37.2.26; see xrc_post_send_inv), only
 *     xrc_win_invalidate() or the next bind end its key; tcp also lets a
 *     peer's send-with-invalidate end it.
 *   XRC_WIN_TYPE2: the key works only for requests arriving on the
 *     connection it was bound through, and that connection's peer may
 *     invalidate it with xrc_post_send_inv() (what a client's NEED_INVAL
 *     read buffer needs).  It must be invalid -- never bound, invalidated
 *     locally, or invalidated by the peer (seen on a receive completion with
 *     has_inv, once polled) -- before it is bound again: xrc_win_bind()
 *     returns -EBUSY otherwise.  It dies with its connection: free it.
 *
 * What a request under a dead key (an old one after a rebind, or any after
 * an invalidation) does:
 *   tcp:  the target refuses it: the initiator's request completes with
 *         -EREMOTEIO, both connections stay up and the target's memory is
 *         untouched (as for a bad MR key);
 *   rdma: the target's QP answers with a remote access error: the
 *         initiator's request completes with -EREMOTEIO and its connection
 *         goes XRC_DOWN; the target's QP goes to the error state too (its
 *         posted receives complete -ECONNRESET, xrc_state() turns XRC_DOWN
 *         when the CM event is seen), as for a bad MR key.
 *
 * rdma specifics: windows need a device that has them (rxe: type 1 and
 * type 2B; elsewhere xrc_win_new fails with "DEV has no type-1 memory
 * windows", errno EOPNOTSUPP).  Regions are registered with MW_BIND access
 * whenever the device has windows.  rxe (Linux 6.1) checks a window
 * request against the bounds of the region under the window, not of the
 * window: a window key reaches the whole region.  Bind windows over a
 * region of exactly the window's size when the bounds matter (RTRS: one
 * region per chunk).  rxe also appears to run a bind again when it
 * retransmits requests posted before it on the same queue, and a second
 * run of a bind fails and takes the connection down: post binds on a
 * connection whose send queue is otherwise empty (rtrs_srv batches them on
 * its service connection and waits for the batch before using the keys). */

enum { XRC_WIN_TYPE2 = 1 };	/* xrc_win_new() flags */

/* A window in domain d, bound to nothing (no key valid yet).  NULL + err. */
struct xrc_win *xrc_win_new(struct xrc_dom *d, unsigned flags, char *err, size_t errlen);
/* Binds w over [addr, addr+len) of mr (same domain as c; len > 0, inside
 * mr) with remote `access` (XRC_ACCESS_REMOTE_WRITE and/or _READ), as a
 * work request on c's send queue: it takes a send-queue slot, completes in
 * order with the others (XRC_OP_BIND when XRC_SIGNALED; an error always
 * completes and fails the connection), and xrc_win_rkey(w) gives the new
 * key as soon as this returns.  Returns 0 or the post errors (-ENOTCONN,
 * -ENOBUFS, -EINVAL) and -EBUSY (type 2 still valid). */
int xrc_win_bind(struct xrc *c, struct xrc_win *w, struct xrc_mr *mr, void *addr, size_t len,
		 unsigned access, uint64_t wr_id, unsigned flags);
/* Leaves w bound to nothing: no key of it is valid once this executes.  A
 * send-queue work request like a bind (completes as XRC_OP_BIND); on rdma a
 * type-1 window is invalidated by a zero-length bind (which steps its key),
 * a type-2 one by a LOCAL_INV of its key.  The window can be bound again. */
int xrc_win_invalidate(struct xrc *c, struct xrc_win *w, uint64_t wr_id, unsigned flags);
/* The key of the last bind (what a peer names in xrc_post_write/_read). */
uint32_t xrc_win_rkey(const struct xrc_win *w);
/* NULL ok.  No bind or invalidate of it may be in flight. */
void xrc_win_free(struct xrc_win *w);

/* --- data path ----------------------------------------------------------- */

/* All return 0, -ENOTCONN (connection down), -ENOBUFS (queue full: poll
 * first), -EINVAL (bad sge count/size, inline too big, missing mr) or
 * -EMSGSIZE (SEND bigger than xrc_max_send()). */
int xrc_post_send(struct xrc *c, const struct xrc_sge *sg, int nsg, uint64_t wr_id,
		  unsigned flags);
int xrc_post_send_imm(struct xrc *c, const struct xrc_sge *sg, int nsg, uint32_t imm,
		      uint64_t wr_id, unsigned flags);
/* A SEND that also asks the receiver to invalidate its key inv_rkey (verbs
 * SEND_WITH_INV; RTRS answers a NEED_INVAL request with an empty one, nsg 0).
 * The receiver's XRC_OP_RECV completion has has_inv and inv_rkey.  What
 * the receiver does with the key:
 *   rdma: what its device does.  A type-2 window bound on the receiving
 *         connection (or a kernel fast-reg MR) is invalidated.  Any other
 *         key -- a type-1 window, a region, an unknown key -- is a remote
 *         invalid-request error: the receiver's receive completes
 *         -EREMOTEIO and its connection fails (the sender's SEND may still
 *         complete with status 0).  Send only keys the peer made
 *         invalidatable.
 *   tcp:  if the key names a window of the receiver's domain that is valid
 *         for this connection (type 1, or type 2 bound on it), that window
 *         is invalidated, as by xrc_win_invalidate(); any other key is only
 *         reported, and the connection carries on. */
int xrc_post_send_inv(struct xrc *c, const struct xrc_sge *sg, int nsg, uint32_t inv_rkey,
		      uint64_t wr_id, unsigned flags);
/* RDMA write of the gathered bytes to the peer's [raddr, raddr+len) under
 * rkey; with `with_imm` the peer gets an XRC_OP_RECV_IMM completion
 * carrying `imm` (and it consumes one of its posted receives).  A
 * zero-length write (nsg 0) checks neither rkey nor raddr (IBA C9-88); with
 * an immediate it is RTRS's heartbeat and still consumes a receive. */
int xrc_post_write(struct xrc *c, const struct xrc_sge *sg, int nsg, uint64_t raddr,
		   uint32_t rkey, bool with_imm, uint32_t imm, uint64_t wr_id,
		   unsigned flags);
/* RDMA read of the peer's [raddr, raddr+len) into the scattered buffers
 * (zero length: no key check either). */
int xrc_post_read(struct xrc *c, const struct xrc_sge *sg, int nsg, uint64_t raddr,
		  uint32_t rkey, uint64_t wr_id, unsigned flags);
/* A SEND of hdr (hlen bytes) followed by data (dlen), both copied into
 * the request at the post (as XRC_INLINE; hlen + dlen <= xrc_max_inline(),
 * no regions needed): a small message's path, one call with no gather
 * list to check.  flags: XRC_SIGNALED, XRC_MORE.  Returns as
 * xrc_post_send(). */
int xrc_send_inline(struct xrc *c, const void *hdr, uint32_t hlen, const void *data,
		    uint32_t dlen, uint64_t wr_id, unsigned flags);
/* One buffer per receive. */
int xrc_post_recv(struct xrc *c, const struct xrc_sge *sg, uint64_t wr_id);
/* n receives at once, buffer sg[i] with wr_id[i] (rdma: one post of a
 * chain of work requests).  Returns the number posted, from the first:
 * fewer than n when the queue filled, n is above XRC_RECV_BATCH or a later
 * buffer is bad (post the rest again: that call says why), or -errno when
 * none was: -ENOBUFS (queue full), -EINVAL, -ENOTCONN. */
int xrc_post_recvs(struct xrc *c, const struct xrc_sge *sg, const uint64_t *wr_id, int n);

/* Rings the doorbell for posts made with XRC_MORE.  0, 1 when part of
 * what is queued is left for a later xrc_flush()/xrc_poll() (tcp: the
 * opts.burst limit; the fd does not announce it, so do not sleep), or
 * -errno. */
int xrc_flush(struct xrc *c);

/* Whether posted bytes wait for room in the transport (tcp: the socket
 * buffer is full).  A caller sleeping on xrc_fd() must then also wait for
 * it to become writable (EPOLLOUT), or nothing wakes it to send them. */
bool xrc_tx_pending(const struct xrc *c);

/* Whether the peer is known to be gone although what it sent before may
 * still wait unread (tcp: its FIN or RST queued behind data, which
 * xrc_poll() drains opts.burst bytes at a time first).  Anything
 * already DOWN is gone too.  For a server short of memory that would
 * rather drop a dead client at once than after its last bytes. */
bool xrc_peer_gone(const struct xrc *c);

/* Makes progress (socket I/O for tcp, CQ polling for rdma) and returns up
 * to n completions, 0 if none, or -errno only for misuse.  Never blocks. */
int xrc_poll(struct xrc *c, struct xrc_wc *wc, int n);
/* A file descriptor that becomes readable when xrc_poll() may have work
 * (register it with epoll, level-triggered) -- once armed: call xrc_arm()
 * before each sleep on it.  (Polling does not arm it, so a busy-polling
 * caller pays no system call per poll for notifications it never uses.) */
int xrc_fd(const struct xrc *c);
/* Makes xrc_fd() signal the next completion.  Returns 1 when completions
 * are already waiting (poll, do not sleep), 0 when armed, or -errno. */
int xrc_arm(struct xrc *c);
/* Readiness the caller learns anyway from its own (level-triggered) epoll
 * set, so that a poll need not ask the socket: over tcp each xrc_poll()
 * is otherwise a read(2), which under light load or on a quiet connection
 * mostly finds nothing.  After xrc_ready_hints(c, true), xrc_poll() reads
 * only while its last read may have left bytes behind, or once xrc_ready()
 * was called -- which the caller must do whenever its epoll_wait() reports
 * xrc_fd() readable (EPOLLIN, EPOLLHUP or EPOLLERR), before the next poll.
 * xrc_wait() reads anyway.
 * Off by default; rdma ignores both (its poll reads a CQ in memory). */
bool xrc_ready_hints(struct xrc *c, bool on);	/* whether c takes them */
void xrc_ready(struct xrc *c);
/* When xrc_poll() must run again although nothing arrives (xtime_ns()
 * clock): a held ACK (opts.ack_delay_ns).  UINT64_MAX: never. */
uint64_t xrc_next_timer(const struct xrc *c);
/* Arms, then blocks until xrc_poll() may have work or timeout_ns passes
 * (0 = don't block).  1 ready, 0 timeout, -errno. */
int xrc_wait(struct xrc *c, uint64_t timeout_ns);

/* Counters (for stats output). */
struct xrc_stats {
	uint64_t tx_bytes, rx_bytes;
	uint64_t sends, recvs, writes, reads;
	uint64_t remote_errors;	/* writes/reads refused on key or bounds */
};
void xrc_get_stats(const struct xrc *c, struct xrc_stats *s);

/* Backend ops table: what xrc.c dispatches to. */
struct xrc_ops {
	const char *name;
	struct xrc_listener *(*listen)(const struct xuri *, const struct xrc_opts *, char *, size_t);
	struct xrc *(*connect)(const struct xuri *, const struct xrc_opts *, const void *, size_t,
			       void *, size_t *, char *, size_t);
};

#endif
