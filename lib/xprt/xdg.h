/* Datagram (UD) service class: unreliable,
 * unordered datagrams of at most the path MTU, received into buffers the
 * endpoint keeps posted.  Backends:
 *
 *   ud://   rdma-core UD QPs: address handles, qkeys; the peer's QPN and
 *           qkey found through librdmacm's UDP port space (SIDR) (xdg_ud.c)
 *   udp://  kernel UDP sockets, sendmmsg/recvmmsg batches (xdg_udp.c)
 *
 * Same completion rules as xrc.h: completions only from xdg_poll(), one
 * thread per endpoint, only xdg_open()/xdg_resolve()/xdg_wait() block
 * (bounded).
 *
 * The endpoint owns its receive buffers (a ring of `rx_depth` buffers of
 * MTU bytes -- UD needs 40 bytes of GRH room in front of each, which the
 * caller should not have to know about); a receive completion points into
 * that ring and the buffer is reposted at the next xdg_poll().
 */
#ifndef XPRT_XDG_H
#define XPRT_XDG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/uri.h"

struct xdg;
struct xdg_addr;	/* a resolved peer, owned by the endpoint */

struct xdg_opts {
	uint32_t mtu;		/* payload bytes per datagram; 0: udp 4096, ud the
				 * port's active MTU.  udp accepts up to 65507; ud
				 * no more than the active MTU */
	uint32_t rx_depth;	/* posted receive buffers (0: 512) */
	uint32_t rx_size;	/* udp: bytes per receive buffer when only smaller
				 * datagrams are expected than are sent (0: mtu);
				 * a bigger one is dropped as truncated */
	uint32_t tx_depth;	/* sends in flight (0: 256) */
	uint32_t qkey;		/* ud: 0 = librdmacm's RDMA_UDP_QKEY */
	uint64_t timeout_ns;	/* xdg_resolve() (0: 5 s) */
	int sndbuf, rcvbuf;	/* udp: socket buffer sizes, 0 = 4 MiB (best effort) */
	bool user_rx;		/* ud: no receive ring: the caller posts its own
				 * scatter lists (xdg_post_recv), rx_depth of them
				 * at most; udp refuses it */
	uint32_t rx_sge;	/* ud user_rx: entries per receive (0: 1; at most 32) */
	bool gro;		/* udp: receive runs of datagrams coalesced by the
				 * kernel (UDP_GRO, Linux 5.0+) into 64 KiB buffers,
				 * handed out one datagram per completion as ever:
				 * far fewer trips through the stack at small MTUs.
				 * On from the start; xdg_set_gro() switches it.
				 * Not with xdg_recv_sg(); ud ignores it */
};

/* Opens an endpoint bound to `u` (udp:// or ud://; host 0.0.0.0 or a local
 * address; port 0 picks a free one).  ud:// with no RDMA device fails with
 * "no RDMA device found (...)". */
struct xdg *xdg_open(const struct xuri *u, const struct xdg_opts *o, char *err, size_t errlen);
void xdg_close(struct xdg *d);		/* NULL ok */
uint32_t xdg_mtu(const struct xdg *d);
uint16_t xdg_port(const struct xdg *d);
/* Whether the kernel coalesces this endpoint's receives (xdg_opts.gro asked
 * for it and the kernel has it). */
bool xdg_gro(const struct xdg *d);
/* Coalesced receives on or off, on an endpoint opened with xdg_opts.gro
 * (off: xdg_recv_sg() may be used; a run the kernel coalesced before is
 * dropped as truncated there).  0, -EINVAL (not opened with gro),
 * -EOPNOTSUPP (ud; udp in a kernel without UDP_GRO), -errno. */
int xdg_set_gro(struct xdg *d, bool on);
enum xuri_scheme xdg_scheme(const struct xdg *d);

/* Resolves a peer endpoint (blocking, bounded).  The result stays valid
 * until xdg_close(); resolving the same peer twice returns the same one. */
struct xdg_addr *xdg_resolve(struct xdg *d, const struct xuri *peer, char *err, size_t errlen);
/* "ADDR:PORT" (udp), "GID/QPN" or, for a sender without a GRH, "lid LID/QPN"
 * (ud). */
const char *xdg_addr_str(const struct xdg_addr *a);

/* The host an address is on, without what tells its sockets or queue
 * pairs apart: udp the IP address without the port (a v4-mapped one as
 * the v4 address, an IPv6 one with its scope), ud the GID, or the LID for
 * a sender whose datagrams came without a GRH (InfiniBand within one
 * subnet; ibv_init_ah_from_wc() leaves the GID zero then).  Addresses of
 * one host give the same bytes, byte for byte, so that a server can share
 * out what it holds per host rather than per socket: a host opens as many
 * ports or QPs as it likes.  Writes at most XDG_HOST_MAX bytes into key
 * and returns how many. */
#define XDG_HOST_MAX	24
size_t xdg_addr_host(const struct xdg_addr *a, uint8_t key[XDG_HOST_MAX]);

/* Sends one datagram of at most xdg_mtu() bytes.  The payload is copied or
 * handed to the device before this returns unless XDG_ZCOPY is given, in
 * which case buf must stay put until the send's completion.  0, -EMSGSIZE,
 * -ENOBUFS (tx queue full: poll), -EAGAIN (socket buffer full: retry after
 * poll/wait). */
enum { XDG_SIGNALED = 1, XDG_ZCOPY = 2 };
int xdg_send(struct xdg *d, const struct xdg_addr *to, const void *buf, size_t len,
	     uint64_t wr_id, unsigned flags);
/* Up to n datagrams in one call (sendmmsg / a chain of WRs).  Returns how
 * many were queued (may be fewer than n), or -errno if none. */
struct xdg_msg {
	const struct xdg_addr *to;
	const void *buf;
	uint32_t len;
	uint64_t wr_id;
};
int xdg_send_batch(struct xdg *d, const struct xdg_msg *m, int n, unsigned flags);
/* The same with a header and a Q_Key per datagram. */
struct xdg_dgram {
	const struct xdg_addr *to;
	const void *hdr;	/* optional: hlen bytes that go in front of buf in the
				 * same datagram (hlen + len <= xdg_mtu()), no copy
				 * on udp (two iovecs) */
	uint32_t hlen;
	const void *buf;
	uint32_t len;
	uint64_t wr_id;
	uint32_t qkey;		/* ud: the Q_Key this datagram carries, e.g. one a
				 * requester chose per request; 0: the address's.
				 * 1..0x7fffffff (the high bit would mean "the
				 * sending QP's own"); udp ignores it */
};
int xdg_send_dgrams(struct xdg *d, const struct xdg_dgram *m, int n, unsigned flags);

enum xdg_op { XDG_OP_SEND, XDG_OP_RECV };
struct xdg_wc {
	enum xdg_op op;
	int status;		/* 0 or -errno; udp connected (xdg_connect): a RECV
				 * with -ECONNREFUSED when the peer's port is closed */
	uint64_t wr_id;		/* SEND; RECV of a user_rx endpoint */
	const void *data;	/* RECV: valid until the next xdg_poll(); NULL for
				 * user_rx (the bytes are in the posted buffers) */
	uint32_t len;		/* RECV: payload bytes (ud: the GRH not counted) */
	struct xdg_addr *src;	/* RECV: the sender, usable with xdg_send(); NULL
				 * for user_rx */
};
/* Lifetime of wc.src: owned by the endpoint, never freed before
 * xdg_close().  udp and ud: senders live in a cache bounded to 4096 entries;
 * when a new sender arrives at a full cache, the entry of the least recently
 * seen sender is reused for it, so a wc.src names the same sender until 4096
 * other senders have been heard from since it was last seen (ud: or longer,
 * while a send to it is in flight).  To keep a peer for longer,
 * xdg_resolve() it: resolved addresses are never reused (and a sender that
 * was resolved comes back as that same pointer). */
/* Progress and completions; never blocks.  n or fewer, 0 if none. */
int xdg_poll(struct xdg *d, struct xdg_wc *wc, int n);
int xdg_fd(const struct xdg *d);
/* 1 ready, 0 timeout, -errno; timeout_ns 0 = don't block. */
int xdg_wait(struct xdg *d, uint64_t timeout_ns);

struct xdg_stats {
	uint64_t tx_pkts, rx_pkts, tx_bytes, rx_bytes;
	uint64_t rx_dropped;	/* kernel drops (SO_RXQ_OVFL) or ring overruns */
	uint64_t rx_truncated;	/* bigger than the MTU: dropped */
	uint64_t rx_runs;	/* udp gro: receives that held more than one datagram */
};
void xdg_get_stats(const struct xdg *d, struct xdg_stats *s);

/* --- per-request endpoints (ibcache, seed 004 3.2) ---------------------------
 *
 * A requester that takes one endpoint per request from a pool needs a few
 * more things than a long-lived endpoint. */

/* Payload bytes a datagram to `to` may carry without IP fragmentation:
 * udp asks the route (IP_MTU of a socket connected there) less the IP and
 * UDP headers, capped at xdg_mtu(); ud: xdg_mtu(). */
uint32_t xdg_path_mtu(struct xdg *d, const struct xdg_addr *to);

/* udp: only datagrams from `peer` are received from now on, and a closed
 * port there comes back as a RECV completion with -ECONNREFUSED (ICMP);
 * NULL undoes it.  0 or -errno; ud: -EOPNOTSUPP (the Q_Key filters). */
int xdg_connect(struct xdg *d, const struct xdg_addr *peer);

/* ud: the QP's own Q_Key, which every datagram it accepts must carry
 * (RTS->RTS, which the IB spec allows for UD QPs; a QP reset where the
 * device refuses that).  udp: 0, nothing to do (its peers check keys in
 * software).  0 or -errno. */
int xdg_set_qkey(struct xdg *d, uint32_t qkey);

/* Makes an endpoint whose last use ended early fit for the next one.
 * ud: the QP goes through RESET (the receives still posted are dropped,
 * completions still queued are discarded, sends in flight forgotten) and
 * back to RTS with `qkey` (0: the current one).  udp: every datagram
 * waiting on the socket is read and dropped.  0 or -errno. */
int xdg_reset(struct xdg *d, uint32_t qkey);

/* A pinned copy, usable with d, of an address resolved on another endpoint
 * of the same scheme (and, for ud, device): one resolution serves a pool of
 * endpoints.  NULL + err when it cannot be made. */
struct xdg_addr *xdg_addr_import(struct xdg *d, const struct xdg_addr *a, char *err,
				 size_t errlen);

/* --- caller-owned receive buffers (ud, user_rx) ------------------------------
 *
 * The scatter/gather receive of seed 004 3.2.2: each receive of a reply
 * lands in a list of the caller's buffers (the GRH room, then the
 * response, then page pieces).  Memory is registered with the device's
 * protection domain, which every ud:// endpoint of the process on that
 * device shares: a registration made through one endpoint serves all. */
struct xdg_mem;
struct xdg_mem *xdg_mem_reg(struct xdg *d, void *buf, size_t len, char *err, size_t errlen);
void xdg_mem_dereg(struct xdg_mem *m);		/* NULL ok */

struct xdg_sge {
	void *addr;
	uint32_t len;
	const struct xdg_mem *mem;	/* the registration addr..addr+len lies in */
};
struct xdg_rwr {
	const struct xdg_sge *sg;
	uint32_t nsge;			/* 1..rx_sge; the first >= 40 bytes: the GRH */
	uint64_t wr_id;			/* given back in the RECV completion */
};
/* Posts n receives, in order: the n datagrams that arrive next fill them
 * in that order.  Returns how many were posted, or -errno if none
 * (-EOPNOTSUPP without user_rx, -EINVAL for a bad list, -ENOBUFS full). */
int xdg_post_recv(struct xdg *d, const struct xdg_rwr *w, int n);

/* udp: receives up to n datagrams now, never blocking, each scattered
 * over its own list w[i] (mem unused; at most 64 entries): a caller that
 * knows where the next datagrams belong lets the kernel copy them there,
 * instead of into the ring and again.  wc[i]: RECV, wr_id, len (the whole
 * datagram), status 0, -EMSGSIZE (longer than its list: cut short) or
 * -ECONNREFUSED (connected, port closed).  How many, 0 when none, -errno
 * (-EOPNOTSUPP for ud, which posts instead, and for a udp endpoint with
 * coalesced receives: a run would not fit one datagram's list). */
int xdg_recv_sg(struct xdg *d, const struct xdg_rwr *w, int n, struct xdg_wc *wc);

#endif
