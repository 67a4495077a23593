/* The xprobe server's rules, without I/O: what the sink counted per client
 * port, the answers to control requests, how many control replies a node
 * may have waiting, and the datagram service (PING answered, DATA counted
 * per session, STATS answered).  cmd/xprobe/serve.c moves the messages and
 * owns the receive buffers; these calls only read and change the tables
 * they are given.  The messages are probe_wire.h's. */
#ifndef XPRT_PROBE_SRV_H
#define XPRT_PROBE_SRV_H

#include <stdbool.h>
#include <stdint.h>

#include "probe/probe_wire.h"

#define PROBE_SINKS		1024	/* client ports the sink keeps counts for */
#define PROBE_CTL_NODES		256
#define PROBE_CTL_PER_NODE	8	/* control replies a node may have waiting */
#define PROBE_WINDOW_MAX	4096	/* messages in flight a client may ask for */
#define PROBE_DG_SESS		256	/* datagram sessions counted at once */
/* Receive buffers on top of what one client's window needs, so a few
 * clients with the same size class can run at once. */
#define PROBE_SHARE_SLACK	8

/* Receive buffers the server sets aside for a client's window: a message
 * holds its buffer from arrival until the application is done with it --
 * for the echo, until the reply is acknowledged -- while the sender
 * already has the next window in flight: both, and the slack. */
static inline unsigned probe_srv_buffers(unsigned window)
{
	return 2 * window + 2 + PROBE_SHARE_SLACK;
}

struct probe_sink {
	uint32_t node;
	unsigned port;
	bool used;
	uint64_t msgs, bytes;
};

struct probe_ctl_node {
	uint32_t node;
	unsigned n;			/* its replies waiting */
};

struct probe_srv {
	uint32_t max_size;		/* the largest message accepted */
	struct probe_sink sink[PROBE_SINKS];
	struct probe_sink *last;	/* the one counted last: a flow's come in a row */
	struct probe_ctl_node ctl[PROBE_CTL_NODES];
};

void probe_srv_init(struct probe_srv *ps, uint32_t max_size);

/* A message of len bytes on the sink from (node, port). */
void probe_srv_sink(struct probe_srv *ps, uint32_t node, unsigned port, uint32_t len);

/* What a control request asks of the driver. */
struct probe_ctl_act {
	struct probe_ctl req;		/* as decoded */
	struct probe_ctl rep;		/* the reply */
	/* SETUP within the limits: the receive buffers of req.size's class at
	 * req.prio the service port must hold (the driver's answer goes in
	 * rep.status: 0, or ENOMEM when they do not fit its budget); 0: none */
	unsigned buffers;
};

/* A message on the control port from (node, port).  0 with *act; the
 * decoder's -EMSGSIZE/-EPROTO for bytes that are not a control message;
 * -EBADMSG for one that is not a request (act->req says which).  A SETUP of
 * the sink starts (node, port)'s counts again. */
int probe_srv_ctl(struct probe_srv *ps, const void *buf, size_t len, uint32_t node, unsigned port,
		  struct probe_ctl_act *act);

/* A reply to node is about to go: false when the node already has
 * PROBE_CTL_PER_NODE waiting (a client that never takes its replies must
 * not tie up the port: the request is ignored).  Each true is matched by
 * one probe_srv_reply_end() when the reply went, or failed to. */
bool probe_srv_reply_begin(struct probe_srv *ps, uint32_t node);
void probe_srv_reply_end(struct probe_srv *ps, uint32_t node);

/* --- datagrams --- */
struct probe_dg_sess {
	const void *from;		/* the sender, as the transport names it */
	uint32_t session;
	uint64_t pkts, bytes, first_ns, last_ns;
};

struct probe_dgsrv {
	struct probe_dg_sess sess[PROBE_DG_SESS];
};

/* A datagram of len bytes from `from` at now: the reply's length written
 * into out (room for len, and for PROBE_DG_STATS_LEN), 0 for none, or the
 * decoder's -errno for one that is not an xprobe datagram.  A new session
 * takes the place of the one heard from least recently. */
int probe_dg_input(struct probe_dgsrv *g, const void *from, const void *buf, uint32_t len,
		   uint64_t now, uint8_t *out);

#endif
