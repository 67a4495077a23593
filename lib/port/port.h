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
 * Callbacks run only inside xp_receive()/xp_blocking_receive() on the same
 * port, never from the send path.  Everything is single-threaded: one
 * thread calls into a host and its ports.
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
 * The library never prints or exits.
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
/* Frees everything: closes ports and connections.  NULL ok. */
void xp_host_free(struct xp_host *h);

/* Accept peer hosts on `u` (tcp://, rdma://, or shm://NAME: the mailbox is
 * created if missing -- and removed by xp_host_free() if we created it --
 * and serves one peer host at a time).  AUTO must be resolved first.
 * 0 or -errno with err. */
int xp_host_listen(struct xp_host *h, const struct xuri *u, char *err, size_t errlen);
/* The bound port of the i-th listener (useful with port 0). */
uint16_t xp_host_listen_port(const struct xp_host *h, unsigned i);

/* Connects to the host at `u` (blocking, bounded by connect_timeout_ns),
 * or returns the node id of the existing connection to it.  Returns a
 * node id (> 0) or -errno with a one-line message naming u in err. */
int xp_host_connect(struct xp_host *h, const struct xuri *u, char *err, size_t errlen);
/* Whether the node's connection is up; its peer address "tcp://1.2.3.4:5". */
bool xp_node_up(const struct xp_host *h, uint32_t node);
const char *xp_node_name(const struct xp_host *h, uint32_t node);

/* How many listeners xp_host_listen() added so far. */
unsigned xp_host_listeners(const struct xp_host *h);

/* An fd (epoll) that is readable when xp_host_progress() has work. */
int xp_host_fd(const struct xp_host *h);
/* Moves bytes: accepts connections, sends fragments, receives them, runs
 * timers.  Never blocks and never runs a user callback.  Returns the
 * number of things done (0: idle), or -errno on a host-wide failure. */
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
void xp_close(struct xp_port *p);	/* NULL ok; pending sends complete DROPPED */
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
 * token.  0, -EAGAIN (no receive token), -EINVAL (size out of 4..31). */
int xp_provide_receive_buffer(struct xp_port *p, void *buf, unsigned size, enum xp_prio prio);
/* Which size classes this port accepts at a priority (bit s = size s);
 * others fail at the sender with XP_SEND_REJECTED.  Default: all. */
void xp_set_acceptable_sizes(struct xp_port *p, enum xp_prio prio, uint64_t mask);

enum xp_event_type { XP_NO_EVENT = 0, XP_RECV_EVENT = 11, XP_HIGH_RECV_EVENT = 12 };
struct xp_event {
	enum xp_event_type type;
	void *buffer;		/* the provided buffer now holding the message */
	uint32_t length;
	unsigned size;
	enum xp_prio prio;
	uint32_t sender_node;	/* unforgeable: the connection it came on */
	unsigned sender_port;
};
/* Progress (unless this port already has something queued), then due
 * send callbacks of this port, then one event.  Returns
 * 1 with *ev filled, 0 when there is none (ev->type XP_NO_EVENT). */
int xp_receive(struct xp_port *p, struct xp_event *ev);
/* Whether xp_receive() on this port has an event or a callback to give.
 * An application that sleeps on xp_host_fd() itself must look at this
 * (after a last xp_host_progress() that did nothing) before it sleeps:
 * progress run from one port's xp_receive() may queue events for another. */
bool xp_port_pending(const struct xp_port *p);
/* The same, waiting up to timeout_ns (0 = forever) for an event; spins for
 * spin_ns first (0: don't spin).  1, 0 on timeout, -EINTR when a signal
 * interrupted the wait. */
int xp_blocking_receive(struct xp_port *p, struct xp_event *ev, uint64_t timeout_ns,
			uint64_t spin_ns);
/* The same with absolute times on the xtime_ns() clock, for a caller that
 * has just read it (a ping's send time): until (UINT64_MAX: forever) and
 * the moment spinning gives way to sleeping.  Reads no clock on entry. */
int xp_blocking_receive_until(struct xp_port *p, struct xp_event *ev, uint64_t until,
			      uint64_t spin_until);

/* GM's fault-tolerance calls for the stream (this port -> node:dst_port,
 * prio) after a failed send.  resume: the stream's waiting sends go out
 * again.  drop: they complete with XP_SEND_DROPPED (callbacks run inside
 * the next xp_receive). */
void xp_resume_sending(struct xp_port *p, enum xp_prio prio, uint32_t node, unsigned dst_port);
void xp_drop_sends(struct xp_port *p, enum xp_prio prio, uint32_t node, unsigned dst_port);

/* Counters for stats output. */
struct xp_port_stats {
	uint64_t sent_msgs, sent_bytes, recv_msgs, recv_bytes;
	uint64_t nacks_nobuf;	/* our sends refused for want of a buffer (retried) */
	uint64_t send_failures;
};
void xp_port_stats(const struct xp_port *p, struct xp_port_stats *s);

#endif
