/* The gfcc requester: requests in flight to peers, each on an endpoint of
 * its own taken from a pool (seed 004 3.2.3 "QP はRPC要求の度に作成/削除
 * するとコストが高いので、再利用する").
 *
 *   udp://  a socket per request, connected to the peer (the kernel drops
 *           strangers' datagrams and reports a closed port); a random
 *           qkey and a fresh id per request, checked in every datagram;
 *           after an incomplete reply the socket is drained before reuse.
 *           Datagrams are received straight into the pages, the way UD
 *           posts its receives: each recvmmsg slot is the scatter list of
 *           a segment expected next (the flow's next ones, then the holes
 *           asked for again); one that brings another segment is moved
 *           once the batch is in, one that is not ours lands only where
 *           nothing good is yet.
 *   ud://   a UD QP per request (seed 004 3.2 figure: 1-3 on the left):
 *           its Q_Key set to a random one per request, so a stray
 *           datagram of an earlier request is dropped by the device, and
 *           receive WRs posted for the whole reply BEFORE the request goes
 *           out -- the shared GRH buffer, then (first WR) the response,
 *           then the page pieces straight into the caller's pages
 *           (gfcc_seg_pieces, seed 3.2.2); after an incomplete reply the
 *           QP is reset at once, so that no late datagram lands in pages
 *           the caller has moved on with.
 *
 * Peers are resolved once, on a resolver endpoint per transport, and the
 * address imported into each pool endpoint.  Requests not complete within
 * the timeout are reaped (milliseconds, not gfarm's 3 minutes).
 *
 * One thread; ibc_req_poll() runs everything (busy-polls for spin_ns
 * after the last event, then sleeps). */
#ifndef XPRT_IBCACHE_IBC_REQ_H
#define XPRT_IBCACHE_IBC_REQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/stats.h"
#include "core/uri.h"
#include "ibcache/ibc_rq.h"

#define IBC_DEPTH_MAX 64

struct ibc_req_opts {
	uint32_t psize;			/* 0: 4096 */
	uint64_t timeout_ns;		/* reaping (0: 500 ms) */
	uint32_t window_bytes;		/* UDP credit (0: 256 KiB) */
	uint32_t depth;			/* requests in flight per transport (0: 8) */
	uint32_t mtu;			/* cap on the datagram payload (0: the path's) */
	uint64_t spin_ns;		/* busy-poll before sleeping (0: 50 us) */
};

struct ibc_req_stats {
	uint64_t requests;		/* sent, retries not counted */
	uint64_t pages_requested;
	uint64_t pages_sent;		/* as the replies announced them */
	uint64_t pages_received;	/* landed whole */
	uint64_t short_replies;		/* fewer pages than asked */
	uint64_t errors;		/* replies with an error (ESTALE, ENOENT...) */
	uint64_t reaped;		/* timed out */
	uint64_t refused;		/* closed port, receive errors */
	uint64_t send_errors;		/* requests our own host did not send
					 * (a local firewall's EPERM, ENOBUFS,
					 * ENOMEM): taken as lost, sent again */
	uint64_t retries;		/* request/RESEND rounds after silence */
	uint64_t fast_resends;		/* RESENDs for holes seen at the end */
	uint64_t segments_asked;	/* segments named in RESENDs */
	uint64_t credits;		/* CREDIT messages */
	uint64_t rejected;		/* datagrams dropped: foreign, truncated, bad */
	uint64_t resets;		/* QPs reset / sockets drained */
	uint64_t endpoints;		/* pool endpoints opened */
	struct xhist rtt;		/* request -> first datagram */
};

struct ibc_done {
	uint64_t tag;			/* the caller's, from submit */
	int peer;
	uint32_t mtu;			/* the datagram size it went with */
	uint32_t taken;			/* pages the request carried: the first
					 * `taken` of those submitted */
	uint32_t reply_pages;		/* the reply's npage (a prefix), when one came */
	bool answered;			/* its response (segment 0) came */
	bool has_size;			/* it told the size of the peer's copy: */
	uint64_t size;
	int err;			/* 0; the responder's errno (ESTALE, ENOENT,
					 * ENOMEM, EMSGSIZE...); or -ETIMEDOUT (reaped),
					 * -ECONNREFUSED, -EBADMSG, -EIO */
	uint64_t ok[GFCC_PAGES_MAX / 64];	/* bit i: page i landed whole */
	uint32_t nok;
};

static inline bool ibc_done_ok(const struct ibc_done *d, uint32_t i)
{
	return d->ok[i / 64] >> (i % 64) & 1;
}

struct ibc_req;
struct ibc_req *ibc_req_new(const struct ibc_req_opts *o);	/* NULL: ENOMEM */
void ibc_req_free(struct ibc_req *q);				/* NULL ok */

/* Resolves a peer (udp:// or ud://; blocking, bounded).  Its id (>= 0),
 * or -errno with a one-line reason in err. */
int ibc_req_add_peer(struct ibc_req *q, const struct xuri *u, char *err, size_t errlen);
const char *ibc_req_peer_name(const struct ibc_req *q, int peer);
/* Pages one request to this peer may carry. */
uint32_t ibc_req_max_pages(const struct ibc_req *q, int peer);
/* Segment payload bytes used with this peer (0 before it is resolved). */
uint32_t ibc_req_seglen(const struct ibc_req *q, int peer);
/* For a udp:// peer that answered EMSGSIZE to a request of datagram size
 * `refused` (ibc_done.mtu): its --mtu is below our path's.  The next
 * requests go with the next size below that one -- 8972 (a 9000-byte
 * link), 1472 (1500), then halves down to gfcc's smallest -- unless they
 * go smaller already (an answer to an older request).  The size they go
 * with, or 0 when there is none below (or the peer is ud://, whose MTU is
 * the port's at both ends). */
uint32_t ibc_req_lower_mtu(struct ibc_req *q, int peer, uint32_t refused);

/* Memory the pages of ud:// requests land in straight from the device
 * (nothing to do for udp://).  0 or -errno + err. */
int ibc_req_register(struct ibc_req *q, void *buf, size_t len, char *err, size_t errlen);

/* Sends a request for the first pages of pages[0..n) (ascending) of
 * (ino, gen) to the peer; page i goes to dst[i] (psize bytes).  Returns
 * how many pages it carries (>= 1), -EBUSY when depth requests of that
 * transport are in flight (poll first), or -errno (ibc_req_error() says
 * why an endpoint could not be had). */
int ibc_req_submit(struct ibc_req *q, int peer, uint64_t ino, uint64_t gen,
		   const uint64_t *pages, uint32_t n, uint8_t *const *dst, uint64_t tag);
uint32_t ibc_req_inflight(const struct ibc_req *q);
/* Why the last submit could not open an endpoint or import an address. */
const char *ibc_req_error(const struct ibc_req *q);

/* Progress: up to max finished requests into done[].  Waits at most
 * wait_ns for one (0: never blocks).  Returns how many, or -errno. */
int ibc_req_poll(struct ibc_req *q, struct ibc_done *done, int max, uint64_t wait_ns);

void ibc_req_get_stats(const struct ibc_req *q, struct ibc_req_stats *s);

#endif
