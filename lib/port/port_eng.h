/* The GM port protocol with no I/O (an engine, sans-I/O): ports, tokens,
 * size classes, per-stream sequencing, the per-priority fragment
 * scheduler, receiver refusal (NACK) with retry and timeout, stream
 * stop/resume/drop, and the per-port queues of receive events and send
 * completions.  Time comes in as an argument (ns, any
 * monotonic origin).
 *
 * The I/O layer (port.c) owns the links.  For each node it
 *   - pulls frames to send per lane with pe_pull() while its transport has
 *     room, and calls pe_frame_done() once the transport no longer reads the
 *     frame's payload (which points into the user's send buffer: zero copy);
 *   - pushes every received frame in with pe_input(); a negative return
 *     means the peer broke the protocol and the link must go;
 *   - runs pe_timers() at pe_next_timer();
 *   - calls pe_node_down() when the link fails, after the transport has
 *     stopped touching every posted frame (closed/flushed).
 *
 * Protocol (seed 001 sections 1-3; frame format in port_wire.h):
 *   - A stream is (src port, dst port, prio) on one node; its messages carry
 *     consecutive seqs and travel in order on the lane of their priority.
 *   - At a message's FIRST fragment the receiver takes a buffer provided
 *     for that size class and priority, or refuses: NACK CLOSED (port not
 *     open), REJECTED (size not acceptable), NOBUF (no buffer).  After a
 *     refusal it discards the stream's frames until the FIRST fragment of
 *     the refused seq comes again, or one flagged SYNC (go-back-N).
 *   - A message is complete at the sender when the receiver's cumulative
 *     ACK covers it; the callback and the send token go back then.
 *   - NOBUF: the sender rewinds the stream to the refused message and
 *     retries after a backoff (backoff_min doubling to backoff_max) until
 *     send_timeout has passed since the first NOBUF of that message:
 *     XP_SEND_TIMED_OUT.  CLOSED/REJECTED fail the message at once.  A
 *     failure stops the stream (its later sends wait) until resume or drop;
 *     the next message sent on it carries SYNC.
 */
#ifndef XPRT_PORT_ENG_H
#define XPRT_PORT_ENG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "port/port.h"
#include "port/port_wire.h"

struct pe_eng;
struct pe_send;

struct pe_opts {
	uint32_t send_tokens;		/* per port (0: 64) */
	uint32_t recv_tokens;		/* per port (0: 256) */
	uint64_t send_timeout_ns;	/* (0: 10 s) */
	uint32_t max_msg;		/* (0: 64 MiB) */
	uint64_t backoff_min_ns;	/* (0: 100 us) */
	uint64_t backoff_max_ns;	/* (0: 20 ms) */
};

struct pe_frame {
	uint8_t hdr[PW_HDR_LEN];
	const void *data;		/* payload, in the user's buffer */
	uint32_t dlen;
	struct pe_send *ref;		/* give back with pe_frame_done(); NULL: control */
};

struct pe_eng *pe_new(const struct pe_opts *o);
void pe_free(struct pe_eng *e);		/* NULL ok */

/* --- nodes (peer hosts) --- */

/* A new node: id > 0, never reused; `nlanes` 1 (both priorities on lane 0)
 * or 2 (lane = priority); `frag` payload bytes per DATA frame.  -ENOMEM. */
int pe_node_add(struct pe_eng *e, unsigned nlanes, uint32_t frag);
/* The link failed: every send to it completes XP_SEND_TARGET_NODE_UNREACHABLE
 * (frames it holds are forgotten: the transport must be done with them),
 * partial receives are abandoned and their buffers kept for reuse.  Later
 * sends to it fail the same way.  Idempotent. */
void pe_node_down(struct pe_eng *e, uint32_t node);
bool pe_node_up(const struct pe_eng *e, uint32_t node);
uint32_t pe_node_count(const struct pe_eng *e);	/* highest id given */
/* Frames of this node's streams handed out and not done yet. */
uint64_t pe_node_refs(const struct pe_eng *e, uint32_t node);

/* --- ports (the user's side; the host maps these 1:1) --- */

int pe_port_open(struct pe_eng *e, unsigned port);	/* 0, -EINVAL, -EBUSY */
/* Closes: pending sends complete XP_SEND_DROPPED (pe_next_completion still
 * returns them until the port is opened again), messages on their way in
 * are refused (NACK CLOSED), buffers and events are forgotten. */
void pe_port_close(struct pe_eng *e, unsigned port);
bool pe_port_is_open(const struct pe_eng *e, unsigned port);
/* Frames of this port's sends still held by the transport. */
uint64_t pe_port_refs(const struct pe_eng *e, unsigned port);
/* Frames of `port`'s sends to `node` the transport still holds. */
uint64_t pe_node_port_refs(const struct pe_eng *e, uint32_t node, unsigned port);
unsigned pe_send_tokens(const struct pe_eng *e, unsigned port);
unsigned pe_recv_tokens(const struct pe_eng *e, unsigned port);

/* xp_send() semantics (port.h).  0, -EAGAIN, -EMSGSIZE, -EINVAL, -ENOENT. */
int pe_send(struct pe_eng *e, unsigned port, uint32_t node, unsigned dst_port,
	    unsigned prio, const void *buf, size_t len, xp_send_cb cb, void *ctx);
/* pe_send for a transport that can post a frame at once: when the message
 * is what pe_pull would give next -- one fragment, the stream and the lane
 * otherwise idle (an ACK the frame carries aside) -- 1 with *f, to be
 * posted now and given back with pe_frame_done like a pulled one;
 * otherwise 0 (queued as pe_send does) or pe_send's error. */
int pe_send_now(struct pe_eng *e, unsigned port, uint32_t node, unsigned dst_port,
		unsigned prio, const void *buf, size_t len, xp_send_cb cb, void *ctx,
		struct pe_frame *f);
int pe_provide(struct pe_eng *e, unsigned port, void *buf, unsigned size, unsigned prio);
void pe_set_acceptable(struct pe_eng *e, unsigned port, unsigned prio, uint64_t mask);
void pe_resume(struct pe_eng *e, unsigned port, unsigned prio, uint32_t node, unsigned dst);
void pe_drop(struct pe_eng *e, unsigned port, unsigned prio, uint32_t node, unsigned dst);

/* A finished send: what its callback gets, and what it was. */
struct pe_done {
	xp_send_cb cb;
	void *ctx;
	enum xp_status status;
	const void *buf;
	uint32_t len;
	uint32_t node;
	unsigned dst_port, prio;
};
/* The next due completion of `port` (its send token comes back): 1, or 0. */
int pe_next_completion(struct pe_eng *e, unsigned port, struct pe_done *d);
/* The callback of the next due completion, without taking it. */
bool pe_peek_completion(const struct pe_eng *e, unsigned port, xp_send_cb *cb);
/* The next receive event (its receive token comes back): 1, or 0. */
int pe_next_event(struct pe_eng *e, unsigned port, struct xp_event *ev);
bool pe_port_pending(const struct pe_eng *e, unsigned port);	/* either queued */
void pe_port_stats(const struct pe_eng *e, unsigned port, struct xp_port_stats *s);

/* --- the I/O side --- */

/* The next frame for (node, lane): control (ACK/NACK) first, then a DATA
 * fragment of the high priority, then of the low.  1 with *f, or 0. */
int pe_pull(struct pe_eng *e, uint32_t node, unsigned lane, struct pe_frame *f);
/* Fragment size for low priority from now on (0: the node's frag; more
 * than it for a transport that moves big fragments another way). */
void pe_node_set_low_frag(struct pe_eng *e, uint32_t node, uint32_t frag);
/* The same, but data only of priority >= min_prio (control frames always):
 * for a transport that must keep room for high priority itself. */
int pe_pull_prio(struct pe_eng *e, uint32_t node, unsigned lane, unsigned min_prio,
		 struct pe_frame *f);
/* After a DATA frame of priority prio went into a pack (PW_PACK_LEN-framed
 * entries): appends at b, while they fit in `room` bytes, the frames that
 * pe_pull_prio(min_prio) would give next, as long as each is a whole
 * message of at most max_frame bytes (header included) of the stream
 * served next.  They are copied: nothing to give back.  Bytes written;
 * *nframes counts the frames. */
size_t pe_pull_pack(struct pe_eng *e, uint32_t node, unsigned lane, unsigned prio,
		    unsigned min_prio, uint32_t max_frame, uint8_t *b, size_t room,
		    unsigned *nframes);
/* Whether pe_pull() would give something. */
bool pe_has_tx(const struct pe_eng *e, uint32_t node, unsigned lane);
/* Whether a lane of the node may have gained something for pe_pull() since
 * the last pe_node_tx_idle() -- which the I/O layer calls after finding
 * every lane empty -- so a busy poller need not ask lane by lane. */
bool pe_node_tx_maybe(const struct pe_eng *e, uint32_t node);
void pe_node_tx_idle(struct pe_eng *e, uint32_t node);
/* Messages taken (whole, in a buffer) on any node since an ACK last went
 * out: the I/O layer sends ACKs at once when many wait, instead of with
 * the next reply. */
uint32_t pe_unacked(const struct pe_eng *e);
void pe_frame_done(struct pe_eng *e, struct pe_send *ref);
/* A frame received on `node`: 0, or -EPROTO with the reason in why. */
int pe_input(struct pe_eng *e, uint32_t node, const void *frame, size_t len, uint64_t now,
	     char *why, size_t whylen);
/* A pack (pw_pack_put's entries, `len` bytes) received on `node`: its
 * frames through pe_input() in order, up to the first bad one.  0, or
 * -EPROTO with the reason in why (a cut pack included). */
int pe_input_pack(struct pe_eng *e, uint32_t node, const void *pack, size_t len, uint64_t now,
		  char *why, size_t whylen);
/* For a transport that places a DATA frame's payload itself (shm: the
 * receiver pulls it from the sender's memory): the header of a frame whose
 * plen payload bytes are not here yet, taken as pe_input() takes the whole
 * frame; *dest is where the bytes go -- in the receive buffer -- or NULL
 * when the frame is to be dropped.  Once they are there, and before
 * anything else goes into the engine, pe_input_placed() with the same
 * header.  0, or -EPROTO with the reason in why. */
int pe_input_hdr(struct pe_eng *e, uint32_t node, const void *hdr, uint32_t plen, uint64_t now,
		 void **dest, char *why, size_t whylen);
void pe_input_placed(struct pe_eng *e, uint32_t node, const void *hdr, uint32_t plen);
/* Retries and send timeouts due at `now`; returns how many fired. */
int pe_timers(struct pe_eng *e, uint64_t now);
/* The earliest pending timer, UINT64_MAX if none. */
uint64_t pe_next_timer(const struct pe_eng *e);

#endif
