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
 *  - verbs tests (ping/bw --op, perftest's operations): a bare reliable
 *    connection (tcp:// or rdma://) to the same listener, told apart from
 *    a port host's by the magic of its CM private data: struct probe_vt
 *    asks for an operation and the server's reply says yes (status 0) or
 *    why not; then each end's first SEND is a struct probe_vt_mem naming
 *    its registered buffer, the target of the other's writes and reads.
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

/* --- verbs tests ------------------------------------------------------------ */
#define PROBE_VT_MAGIC	0x58505654u	/* "XPVT" */
#define PROBE_VT_LEN	24		/* request and reply (CM private data) */
#define PROBE_VT_MEM_LEN 16
#define PROBE_VT_MAX_DEPTH 1024

enum probe_vt_op { PROBE_VT_WRITE = 1, PROBE_VT_READ = 2, PROBE_VT_SEND = 3 };
enum {
	PROBE_VT_IMM = 1,	/* writes and sends carry an immediate */
	PROBE_VT_LAT = 2,	/* one at a time, answered (latency) */
};

/* magic(4) version(1) op(1) flags(1) status(1) size(4) depth(4) zero(8) */
struct probe_vt {
	uint8_t op, flags;
	uint8_t status;		/* reply: 0, or a positive errno (EMSGSIZE: size
				 * over max; ENOMEM: over the server's budget) */
	uint32_t size;		/* request: bytes per operation (1 or more);
				 * reply: the largest the server takes */
	uint32_t depth;		/* operations in flight, 1..PROBE_VT_MAX_DEPTH */
};
void probe_vt_encode(const struct probe_vt *v, uint8_t out[PROBE_VT_LEN]);
/* Whether private data claims to be a verbs test at all (its magic). */
int probe_vt_is(const void *buf, size_t len);
/* 0, -EMSGSIZE (shorter than PROBE_VT_LEN), -EPROTO (magic, version, op,
 * flags, depth or the zero bytes). */
int probe_vt_decode(const void *buf, size_t len, struct probe_vt *v);

/* addr(8) rkey(4) len(4): a registered buffer of the sender's */
struct probe_vt_mem {
	uint64_t addr;
	uint32_t rkey, len;
};
void probe_vt_mem_encode(const struct probe_vt_mem *m, uint8_t out[PROBE_VT_MEM_LEN]);
int probe_vt_mem_decode(const void *buf, size_t len, struct probe_vt_mem *m);

#endif
