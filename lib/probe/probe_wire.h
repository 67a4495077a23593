/* xprobe's own messages (documented in xprobe(1), PROTOCOL):
 *
 *  - over ports (shm/tcp/rdma): a server opens three service ports --
 *    PROBE_PORT_ECHO (0) sends every message back to its sender,
 *    PROBE_PORT_SINK (1) counts and discards, PROBE_PORT_CTL (2) answers
 *    struct probe_ctl requests: SETUP (provide `window` receive buffers of
 *    the size class of `size` at `prio` on a service port, so the client's
 *    sends find buffers -- GM's rule that the receiver must provide buffers
 *    of every size it accepts) and STATS (what the sink got from the
 *    requesting port).
 *  - over datagrams (udp/ud): every datagram starts with struct probe_dg;
 *    PING is answered by a PONG with the same session/seq and length, DATA
 *    is counted per session, STATS_REQ gets a STATS_REP.
 *
 * All fields are big-endian; decoders check magic, version, type and
 * length and return -EPROTO / -EMSGSIZE rather than trusting anything.
 */
#ifndef XPRT_PROBE_WIRE_H
#define XPRT_PROBE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define PROBE_VERSION	1

enum { PROBE_PORT_ECHO = 0, PROBE_PORT_SINK = 1, PROBE_PORT_CTL = 2, PROBE_PORT_CLIENT = 8 };

/* --- over ports ---------------------------------------------------------- */
#define PROBE_CTL_MAGIC	0x58505243u	/* "XPRC" */
#define PROBE_CTL_LEN	40

enum probe_ctl_type {
	PROBE_SETUP_REQ = 1,
	PROBE_SETUP_REP = 2,
	PROBE_STATS_REQ = 3,
	PROBE_STATS_REP = 4,
};

/* Reply status: 0, or a positive errno (ENOMEM: the server's buffer budget
 * is spent; EMSGSIZE: bigger than the server accepts; EINVAL). */
struct probe_ctl {
	uint8_t type;
	uint8_t service;	/* PROBE_PORT_ECHO or PROBE_PORT_SINK */
	uint8_t prio;
	uint32_t size;		/* message size the client will send */
	uint32_t window;	/* messages it will have in flight */
	uint32_t status;
	uint32_t max_size;	/* SETUP_REP: the largest size the server accepts */
	uint64_t msgs;		/* STATS_REP */
	uint64_t bytes;
};

void probe_ctl_encode(const struct probe_ctl *c, uint8_t out[PROBE_CTL_LEN]);
/* 0, -EMSGSIZE (wrong length), -EPROTO (magic, version, type, service or
 * prio out of range). */
int probe_ctl_decode(const void *buf, size_t len, struct probe_ctl *c);

/* --- over datagrams ------------------------------------------------------- */
#define PROBE_DG_MAGIC	0x58505244u	/* "XPRD" */
#define PROBE_DG_HDR	16
#define PROBE_DG_STATS_LEN (PROBE_DG_HDR + 24)

enum probe_dg_type {
	PROBE_DG_PING = 1,
	PROBE_DG_PONG = 2,
	PROBE_DG_DATA = 3,
	PROBE_DG_STATS_REQ = 4,
	PROBE_DG_STATS_REP = 5,
};

struct probe_dg {
	uint8_t type;
	uint32_t session;
	uint32_t seq;
	/* STATS_REP only */
	uint64_t pkts, bytes, span_ns;
};

/* Writes the header (and, for STATS_REP, the counters) into out, which has
 * room for len >= PROBE_DG_HDR (PROBE_DG_STATS_LEN for STATS_REP) bytes. */
void probe_dg_encode(const struct probe_dg *d, uint8_t *out);
int probe_dg_decode(const void *buf, size_t len, struct probe_dg *d);

#endif
