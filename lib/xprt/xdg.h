/* Datagram (UD) service class, DESIGN.md "Transports": unreliable,
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
	uint32_t tx_depth;	/* sends in flight (0: 256) */
	uint32_t qkey;		/* ud: 0 = librdmacm's RDMA_UDP_QKEY */
	uint64_t timeout_ns;	/* xdg_resolve() (0: 5 s) */
	int sndbuf, rcvbuf;	/* udp: socket buffer sizes, 0 = 4 MiB (best effort) */
};

/* Opens an endpoint bound to `u` (udp:// or ud://; host 0.0.0.0 or a local
 * address; port 0 picks a free one).  ud:// with no RDMA device fails with
 * "no RDMA device found (...)". */
struct xdg *xdg_open(const struct xuri *u, const struct xdg_opts *o, char *err, size_t errlen);
void xdg_close(struct xdg *d);		/* NULL ok */
uint32_t xdg_mtu(const struct xdg *d);
uint16_t xdg_port(const struct xdg *d);
enum xuri_scheme xdg_scheme(const struct xdg *d);

/* Resolves a peer endpoint (blocking, bounded).  The result stays valid
 * until xdg_close(); resolving the same peer twice returns the same one. */
struct xdg_addr *xdg_resolve(struct xdg *d, const struct xuri *peer, char *err, size_t errlen);
/* "ADDR:PORT" (udp) or "GID/QPN" (ud). */
const char *xdg_addr_str(const struct xdg_addr *a);

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

enum xdg_op { XDG_OP_SEND, XDG_OP_RECV };
struct xdg_wc {
	enum xdg_op op;
	int status;		/* 0 or -errno */
	uint64_t wr_id;		/* SEND only */
	const void *data;	/* RECV: valid until the next xdg_poll() */
	uint32_t len;
	struct xdg_addr *src;	/* RECV: the sender, usable with xdg_send() */
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
};
void xdg_get_stats(const struct xdg *d, struct xdg_stats *s);

#endif
