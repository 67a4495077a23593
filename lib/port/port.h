/* GM-style ports (seed 001, "Programming Model"; Myricom GM's gm.h
 * semantics).
 *
 * A process runs one host (struct xp_host): it listens on zero or more
 * addresses and keeps ONE reliable connection per peer host -- shm://,
 * tcp:// or rdma:// -- over which every port of both hosts is multiplexed.
 * A tcp or rdma connection has two lanes (two sockets / two QPs), one per
 * priority, so a high-priority message never waits behind low-priority
 * bytes already queued in the kernel or the NIC; GM's NIC kept separate
 * send queues per priority for the same reason.  Within a lane, messages
 * are cut into fragments and the sender always takes the next fragment of
 * a high-priority message before one of a low-priority message.
 *
 * Peer hosts are named by node ids (like GM's node ids): small integers,
 * never reused within a host's life, so an id whose host went away simply
 * fails sends with XP_SEND_TARGET_NODE_UNREACHABLE.
 *
 * Delivery is reliable and ordered per (sending port, receiving port,
 * priority) -- a "stream".  The two priorities never block each other.
 *
 * Tokens (seed 001 sections 2-3): a port starts with xp_num_send_tokens()
 * send tokens and xp_num_receive_tokens() receive tokens.  xp_send() gives
 * one send token up; its callback gives it back.  xp_provide_receive_buffer()
 * gives a receive token up; the receive event for that buffer gives it back.
 * A message of `len` bytes has size class xp_min_size_for_length(len) =
 * ceil(log2(len + 8)) and lands only in a buffer provided with that size
 * class and the message's priority.
 *
 * The event loop (seed 001 section 2): xp_receive() returns one event.
 * XP_RECV_EVENT and XP_HIGH_RECV_EVENT are messages; XP_SENT_EVENT and
 * XP_FAILED_SEND_EVENT finish sends made with xp_send_no_callback(); every
 * other event goes to xp_unknown(), and only there do send callbacks and
 * alarm callbacks run -- never from the send path, never from progress:
 *
 *	switch (xp_receive(p, &ev) ? ev.type : XP_NO_EVENT) {
 *	case XP_NO_EVENT:	break;
 *	case XP_RECV_EVENT:
 *	case XP_HIGH_RECV_EVENT: use(ev.buffer, ev.length); provide it again;
 *				break;
 *	default:		xp_unknown(p, &ev);
 *	}
 *
 * Everything is single-threaded: one thread calls into a host and its
 * ports.
 *
 * DMA memory (seed 001 section 1): xp_dma_malloc() gives registered
 * memory, xp_register_memory() registers memory the program already has.
 * Over rdma:// a send whose bytes lie in memory its port registered goes
 * from that memory (the NIC gathers header and payload: no copy); any
 * other buffer is copied into the lane's own registered buffers first.
 * Over tcp:// the kernel copies from the user's buffer in any case.  Over
 * shm:// small fragments are written once into the mailbox and copied
 * once out of it, and a bulk low-priority flow goes in big fragments that
 * the receiver pulls straight from the sender's memory into its receive
 * buffer (process_vm_readv(2): one copy; where the peer may not read our
 * memory -- ptrace rules -- everything goes through the mailbox).
 * Received messages always land in the buffers the receiver provided.
 *
 * Errors a user can act on (GM statuses, same numbers):
 *   XP_SEND_TARGET_PORT_CLOSED  the receiving port is not open
 *   XP_SEND_TIMED_OUT           the receiver provided no matching buffer
 *                               within the send timeout
 *   XP_SEND_REJECTED            the size class is not acceptable there
 *                               (xp_set_acceptable_sizes)
 *   XP_SEND_TARGET_NODE_UNREACHABLE  the connection to the host failed
 *   XP_SEND_DROPPED             dropped by xp_drop_sends()
 * After any failure but DROPPED the stream stays stopped: later sends on
 * it wait (their tokens stay out) until xp_resume_sending() lets them go,
 * or xp_drop_sends() completes them with XP_SEND_DROPPED.
 *
 * The library never exits.  It writes to standard error only through
 * core/log.h, and by default (XPRT_LOG=warn) only what it has no caller
 * to return to: a connection a listener failed to accept or pair, an
 * epoll registration that failed.  XPRT_LOG=error silences those.
 */
#ifndef XPRT_PORT_H
#define XPRT_PORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/uri.h"

struct xp_host;
struct xp_port;

#define XP_MAX_PORTS	64	/* port ids 0..63 */
#define XP_MAX_SIZE	31	/* largest size class: messages up to 2^31 - 9 bytes */

enum xp_prio { XP_LOW = 0, XP_HIGH = 1 };

enum xp_status {
	XP_SUCCESS = 0,
	XP_SEND_TIMED_OUT = 15,
	XP_SEND_REJECTED = 16,
	XP_SEND_TARGET_PORT_CLOSED = 17,
	XP_SEND_TARGET_NODE_UNREACHABLE = 18,
	XP_SEND_DROPPED = 19,
};
/* "success", "send timed out (receiver provided no buffer)", ... */
const char *xp_strstatus(enum xp_status s);

#define XP_MAX_TOKENS (1u << 24)	/* per port and kind */

struct xp_host_opts {
	uint32_t send_tokens;	/* per port (0: 64; at most XP_MAX_TOKENS) */
	uint32_t recv_tokens;	/* per port (0: 256; at most XP_MAX_TOKENS) */
	uint32_t frag;		/* fragment payload bytes (0: 32 KiB on tcp, 64 KiB on
				 * rdma; shm: the mailbox packet size) */
	uint64_t send_timeout_ns; /* no buffer at the receiver for this long
				 * fails the send with XP_SEND_TIMED_OUT (0: 10 s) */
	uint64_t connect_timeout_ns; /* (0: 5 s) */
	uint32_t max_msg;	/* largest message (0: 64 MiB) */
};

/* A host with no listener yet.  NULL + err. */
struct xp_host *xp_host_new(const struct xp_host_opts *o, char *err, size_t errlen);
/* Frees everything: ports and connections, after one last round that
 * acknowledges what came in.  Pending sends' callbacks do not run; set
 * alarms are let go.  NULL ok. */
void xp_host_free(struct xp_host *h);

/* Accept peer hosts on `u` (tcp://, rdma://, or shm://NAME: the mailbox is
 * created if missing -- and removed by xp_host_free() if we created it --
 * and serves one peer host at a time).  AUTO must be resolved first.
 * 0 or -errno with err. */
int xp_host_listen(struct xp_host *h, const struct xuri *u, char *err, size_t errlen);
/* The bound port of the i-th listener (useful with port 0). */
uint16_t xp_host_listen_port(const struct xp_host *h, unsigned i);
/* Connection requests on the host's tcp:// and rdma:// listeners that are
 * not a port host's (their CM private data lacks the port protocol's
 * magic) go to fn, which takes the request -- xrc_accept() or
 * xrc_reject() it, and returns true -- or leaves it to be refused (false).
 * For a program that serves another protocol on the same address (xprobe's
 * verbs tests).  fn runs inside xp_host_progress(). */
struct xrc_req;
typedef bool (*xp_foreign_fn)(void *arg, struct xrc_req *r);
void xp_host_set_foreign(struct xp_host *h, xp_foreign_fn fn, void *arg);

/* Connects to the host at `u` (blocking, bounded by connect_timeout_ns),
 * or returns the node id of the existing connection to it.  Returns a
 * node id (> 0) or -errno with a one-line message naming u in err. */
int xp_host_connect(struct xp_host *h, const struct xuri *u, char *err, size_t errlen);
/* Whether the node's connection is up; its peer address "tcp://1.2.3.4:5". */
bool xp_node_up(const struct xp_host *h, uint32_t node);
const char *xp_node_name(const struct xp_host *h, uint32_t node);

/* How many listeners xp_host_listen() added so far. */
unsigned xp_host_listeners(const struct xp_host *h);

/* An fd (epoll) that is readable when xp_host_progress() has work; call it
 * only to sleep on it.  From the first call on, every link's fd stays in
 * it (otherwise a tcp link's is in it from a sleep in one of the host's
 * own waits until 256 progress rounds without one). */
int xp_host_fd(struct xp_host *h);
/* Moves bytes: accepts connections, sends fragments, receives them, runs
 * timers.  Never runs a user callback, and never blocks but in one case:
 * a shm link that fails while the peer is pulling a big fragment from our
 * memory is waited on (a second at most) until the peer has let go of
 * it, since the buffer goes back to its owner next.  Returns the number
 * of things done (0: idle), or -errno on a host-wide failure. */
int xp_host_progress(struct xp_host *h);
/* How long a caller sleeping on xp_host_fd() may wait before the host's
 * next timer (a retry, a timeout) is due: 0..max_ms. */
int xp_host_timeout_ms(const struct xp_host *h, int max_ms);

/* For an application that serves other fds too: xp_host_add_fd() puts fd
 * (EPOLLIN) into the host's wait set, and xp_host_wait() sleeps until any
 * of them or a link has something, a host timer is due, or timeout_ns
 * passes.  Unlike epoll on xp_host_fd(), it also wakes for shm:// links
 * (which have no fd: it sleeps on the mailbox, and looks at the fds every
 * millisecond meanwhile).  0, or -EINTR on a signal. */
int xp_host_add_fd(struct xp_host *h, int fd);
int xp_host_wait(struct xp_host *h, uint64_t timeout_ns);

/* Ports. */
struct xp_port *xp_open(struct xp_host *h, unsigned port_id, char *err, size_t errlen);
/* NULL ok.  Pending sends complete XP_SEND_DROPPED: their callbacks run
 * inside xp_close() (the port has no event loop after it); those of
 * xp_send_no_callback() just end.  Alarms are cancelled, DMA memory freed
 * and registrations forgotten.  DROPPED here says the send was not
 * acknowledged when the port closed, not that it never arrived: one
 * already on the wire may have (a program that sends it again may
 * deliver it twice).  Since nothing may read a send's buffer
 * after its callback, xp_close() first lets the transports finish with
 * the frames they hold of the port's sends -- progress, up to a second:
 * a peer that does not read (a full tcp socket, a big shm fragment it
 * has not pulled) -- and then fails each link that still holds one, with
 * every other port's sends on it (XP_SEND_TARGET_NODE_UNREACHABLE; over
 * shm after up to another second for the peer to let go of what it was
 * pulling): a port closed while its peers read costs nothing of the sort. */
void xp_close(struct xp_port *p);
unsigned xp_port_id(const struct xp_port *p);
/* A pointer for the application, e.g. for use in send callbacks. */
void xp_port_set_user(struct xp_port *p, void *user);
void *xp_port_user(const struct xp_port *p);
unsigned xp_num_send_tokens(const struct xp_port *p);
unsigned xp_num_receive_tokens(const struct xp_port *p);

/* GM's size class, ceil(log2(len + 8)), but never below 4: GM's smallest
 * buffer holds 8 bytes, so a message of 0..8 bytes is class 4. */
#define XP_MIN_SIZE	4

static inline unsigned xp_min_size_for_length(uint64_t len)
{
	unsigned s = XP_MIN_SIZE;

	while ((1ull << s) < len + 8)
		s++;
	return s;
}
static inline uint64_t xp_max_length_for_size(unsigned size)
{
	return size >= XP_MIN_SIZE ? (1ull << size) - 8 : 0;
}

typedef void (*xp_send_cb)(struct xp_port *p, void *ctx, enum xp_status status);

/* Sends len bytes of buf (which must stay unchanged until the callback) to
 * port dst_port of `node`.  Gives up one send token.  0, or: -EAGAIN (no
 * send token), -EMSGSIZE (len > max_msg), -EINVAL (bad port or prio),
 * -ENOENT (no such node).  A node that is down is not an error here: the
 * callback reports XP_SEND_TARGET_NODE_UNREACHABLE. */
int xp_send(struct xp_port *p, uint32_t node, unsigned dst_port, enum xp_prio prio,
	    const void *buf, size_t len, xp_send_cb cb, void *ctx);

/* Gives a buffer of at least xp_max_length_for_size(size) bytes for one
 * message of size class `size` and priority `prio`.  Gives up one receive
 * token.  Of several buffers of a size and priority, the one provided last
 * is filled first (it is the likeliest to be in the cache).  0, -EAGAIN
 * (no receive token), -EINVAL (size out of 4..31). */
int xp_provide_receive_buffer(struct xp_port *p, void *buf, unsigned size, enum xp_prio prio);
/* Which size classes this port accepts at a priority (bit s = size s);
 * others fail at the sender with XP_SEND_REJECTED.  Default: all. */
void xp_set_acceptable_sizes(struct xp_port *p, enum xp_prio prio, uint64_t mask);

/* Sends like xp_send(), with no callback: the completion comes back from
 * xp_receive() as an XP_SENT_EVENT (buffer and length of the message, and
 * the send token with it) or, when it failed, an XP_FAILED_SEND_EVENT with
 * the status (GM's gm_send() and its GM_SENT_EVENT). */
int xp_send_no_callback(struct xp_port *p, uint32_t node, unsigned dst_port, enum xp_prio prio,
			const void *buf, size_t len);

/* Event types keep GM's numbers where GM has them. */
enum xp_event_type {
	XP_NO_EVENT = 0,
	XP_FAILED_SEND_EVENT = 1,	/* xp_send_no_callback() failed */
	XP_ALARM_EVENT = 2,		/* for xp_unknown(): an alarm is due */
	XP_SENT_EVENT = 3,		/* xp_send_no_callback() delivered */
	XP_RECV_EVENT = 11,		/* a low-priority message */
	XP_HIGH_RECV_EVENT = 12,	/* a high-priority message */
	XP_SENT_TOKENS_EVENT = 32,	/* for xp_unknown(): send callbacks are due */
};
struct xp_event {
	enum xp_event_type type;
	void *buffer;		/* RECV: the provided buffer now holding the message;
				 * SENT, FAILED_SEND: the buffer that was sent */
	uint32_t length;
	unsigned size;		/* RECV: the size class */
	enum xp_prio prio;
	uint32_t sender_node;	/* RECV: unforgeable, the connection it came on */
	unsigned sender_port;
	uint32_t target_node;	/* SENT, FAILED_SEND: where it went */
	unsigned target_port;
	enum xp_status status;	/* FAILED_SEND: why */
};
/* Progress (unless this port already has something queued), then one
 * event: a message first, then due send callbacks (as one
 * XP_SENT_TOKENS_EVENT, or an XP_SENT_EVENT/XP_FAILED_SEND_EVENT), then a
 * due alarm.  Returns 1 with *ev filled, 0 when there is none (ev->type
 * XP_NO_EVENT). */
int xp_receive(struct xp_port *p, struct xp_event *ev);
/* The handler for every event the program does not handle itself: runs the
 * due send callbacks (XP_SENT_TOKENS_EVENT) or alarm callbacks
 * (XP_ALARM_EVENT); a receive event passed here gives its buffer back to
 * the port for the next message of that size and priority (GM: the
 * receive token returns to GM).  Any other type: nothing.  A callback may
 * send, set alarms and close the port; what the send callbacks of one call
 * send goes out together when it returns (over shm, small messages share
 * mailbox packets). */
void xp_unknown(struct xp_port *p, const struct xp_event *ev);
/* Whether xp_receive() on this port has an event or a callback to give.
 * An application that sleeps on xp_host_fd() itself must look at this
 * (after a last xp_host_progress() that did nothing) before it sleeps:
 * progress run from one port's xp_receive() may queue events for another. */
bool xp_port_pending(const struct xp_port *p);
/* The same, waiting up to timeout_ns (0 = forever) for an event; spins for
 * spin_ns first, and on while the host moved traffic within the last
 * spin_ns (0: don't spin).  1, 0 on timeout (at once on a closed port),
 * -EINTR when a signal interrupted the wait. */
int xp_blocking_receive(struct xp_port *p, struct xp_event *ev, uint64_t timeout_ns,
			uint64_t spin_ns);
/* The same with absolute times on the xtime_ns() clock, for a caller that
 * has just read it (a ping's send time): until (UINT64_MAX: forever) and
 * the moment spinning gives way to sleeping; what is left of the spin at
 * entry is also how long traffic keeps it spinning after that moment.
 * Reads no clock on entry. */
int xp_blocking_receive_until(struct xp_port *p, struct xp_event *ev, uint64_t until,
			      uint64_t spin_until);

/* Alarms (GM's gm_set_alarm): the callback runs inside xp_unknown() for an
 * XP_ALARM_EVENT of the port, no earlier than usecs after xp_set_alarm().
 * The struct is the caller's and must stay put while the alarm is set.
 * Setting a set alarm moves it; cancelling one that is not set, or
 * already ran, does nothing; xp_close() cancels the port's alarms. */
struct xp_alarm {
	struct xp_alarm *next;		/* fields of the library */
	struct xp_port *port;
	uint64_t due;
	void (*cb)(void *ctx);
	void *ctx;
	bool set;
};
void xp_initialize_alarm(struct xp_alarm *a);
void xp_set_alarm(struct xp_port *p, struct xp_alarm *a, uint64_t usecs, void (*cb)(void *ctx),
		  void *ctx);
void xp_cancel_alarm(struct xp_alarm *a);

/* DMA memory (GM's gm_dma_malloc and gm_register_memory).  A range is
 * pinned on an RDMA device when a send of its port from it first goes
 * over that device (a failure there -- the locked-memory limit, say --
 * means copies); without RDMA it only records the range.  Ranges of one
 * port may not overlap.  As with free(), deregister or free memory only
 * once the callbacks of the sends from it have run.
 * xp_dma_malloc: page-aligned, zeroed, registered memory of len bytes, or
 * NULL with errno; from 1 MiB on it is made of whole 2 MiB pages, 2 MiB
 * aligned, that the kernel may back with transparent huge pages (what
 * pins the memory -- registration, or a peer's process_vm_readv over
 * shm:// -- then walks one entry per 2 MiB).  xp_register_memory / xp_deregister_memory: 0 or -EINVAL
 * (empty range, one past the end of the address space, or not exactly a
 * registered one), -EEXIST (overlaps one),
 * -ENOMEM.  Closing the port frees its DMA memory and forgets its
 * registrations. */
void *xp_dma_malloc(struct xp_port *p, size_t len);
void xp_dma_free(struct xp_port *p, void *ptr);
int xp_register_memory(struct xp_port *p, void *ptr, size_t len);
int xp_deregister_memory(struct xp_port *p, void *ptr, size_t len);

/* GM's fault-tolerance calls for the stream (this port -> node:dst_port,
 * prio) after a failed send.  resume: the stream's waiting sends go out
 * again.  drop: they complete with XP_SEND_DROPPED (their callbacks run
 * through the port's next XP_SENT_TOKENS_EVENT). */
void xp_resume_sending(struct xp_port *p, enum xp_prio prio, uint32_t node, unsigned dst_port);
void xp_drop_sends(struct xp_port *p, enum xp_prio prio, uint32_t node, unsigned dst_port);

/* Counters for stats output. */
struct xp_port_stats {
	uint64_t sent_msgs, sent_bytes, recv_msgs, recv_bytes;
	uint64_t nacks_nobuf;	/* our sends refused for want of a buffer (retried) */
	uint64_t send_failures;
	/* payload bytes the transport took straight from the sender's memory,
	 * posted or pulled (a retransmission counts again): rdma gathers from
	 * registered memory, shm's peer pulls big fragments */
	uint64_t direct_bytes;
};
void xp_port_stats(const struct xp_port *p, struct xp_port_stats *s);

#endif
