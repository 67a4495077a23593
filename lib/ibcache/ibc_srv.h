/* The gfcc responder, sans I/O (seed 004 3.3.3 "rpc 要求受信" and 3.3.5):
 * datagrams from the public endpoint go in, reply datagrams come out.
 *
 *   request   decoded and checked; the page store fills the prefix of the
 *             requested pages it holds (the callback: files under the
 *             export, lib/ibcache/ibc_map.h); the reply -- the rpc2
 *             response then the pages, one byte stream -- is cut into
 *             segments of the seglen the requester posted for
 *             (gfcc_seg.h), sent in order to the requester's QP/socket.
 *             An error (ESTALE, ENOENT, limits) is the response alone.
 *   UDP       (the request carries a window): xprt's credits.  The
 *             responder may have sent at most `allow` datagrams; allow
 *             starts at the window and only grows, by the requester's
 *             CREDIT/RESEND messages (allow = window + arrived + asked),
 *             RESEND queues segments again (ahead of new ones), FIN frees
 *             the request.  Duplicates of a request are ignored: the
 *             requester asks for what it lacks with RESEND.
 *   UD, or no window: gfarm's way -- everything at once, no state kept
 *             once it is out.  The same for a one-datagram reply: a lost
 *             one is rebuilt from the request sent again.
 *
 * Bounds: at most max_states requests with data held and max_mem bytes of
 * them, and of those at most peer_states and peer_mem for one requesting
 * host (cfg.host: all the requesters -- sockets, QPs -- on one host share
 * it, since a host can open as many of them as it likes), so that one
 * that holds its replies waiting for credit it never grants cannot shut
 * the others out; a request beyond gets ENOMEM at once (the requester goes
 * to the next source) after requests whose reply is wholly sent, oldest
 * first (the host's own first when it is at its share), were dropped to
 * make room.  A request idle for ttl is freed.  Error replies need no
 * state: at most IBC_SRV_ERR_MAX wait to go out.
 *
 * Peers are opaque pointers (the transport's sender address); the same
 * pointer must name the same requester for as long as a request lives. */
#ifndef XPRT_IBCACHE_IBC_SRV_H
#define XPRT_IBCACHE_IBC_SRV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ibcache/gfcc_seg.h"

#define IBC_SRV_ERR_MAX	256
/* The least max_mem: one full reply (the response and 1 MiB of pages) */
#define IBC_SRV_MEM_MIN	(GFCC_RES_LEN + GFCC_MAX_BYTES)
#define IBC_SRV_HOST_MAX	24

/* The host a peer is on, as at most IBC_SRV_HOST_MAX bytes that are the
 * same for every peer on it (xdg_addr_host()); returns how many. */
typedef size_t (*ibc_srv_host_fn)(const void *peer, uint8_t key[IBC_SRV_HOST_MAX]);

struct ibc_srv_cfg {
	enum gfcc_flavour flavour;	/* GFCC_UDP, or GFCC_UD (ud://) */
	uint32_t mtu;			/* datagram payload limit of the endpoint */
	uint32_t max_states;		/* 0: 1024 */
	uint64_t max_mem;		/* 0: 256 MiB; else at least IBC_SRV_MEM_MIN */
	uint64_t ttl_ns;		/* 0: 2 s */
	uint32_t burst;			/* datagrams of one request per turn (0: 64) */
	uint32_t peer_states;		/* of max_states one host may hold (0: a quarter) */
	uint64_t peer_mem;		/* of max_mem (0: a quarter, at least IBC_SRV_MEM_MIN) */
	ibc_srv_host_fn host;		/* NULL: each peer pointer is a host of its own */
};

/* The page store: fills buf with the prefix of q's pages it holds, in
 * request order, and *size with the size of its copy in bytes
 * (UINT64_MAX: not known; told in the reply, gfcc_wire.h).  Returns how
 * many pages (0..q->npage) or -errno (-ENOENT, -ESTALE, -EIO). */
typedef int (*ibc_srv_read_fn)(void *ctx, const struct gfcc_req *q, uint8_t *buf, uint64_t now,
			       uint64_t *size);

struct ibc_srv_stats {
	uint64_t requests;		/* decoded requests, duplicates not counted */
	uint64_t bad_requests;		/* refused by the decoder (EINVAL, E2BIG...) */
	uint64_t dup_requests;
	uint64_t replies, short_replies;/* short: fewer pages than asked */
	uint64_t stale, not_found, errors;	/* ESTALE, ENOENT, other errors */
	uint64_t refused;		/* ENOMEM: over max_states or max_mem */
	uint64_t pages_sent;		/* pages in the replies */
	uint64_t segments_sent;		/* first sends */
	uint64_t resent;		/* segments sent again */
	uint64_t bytes_sent;		/* payload, headers included */
	uint64_t credits, resend_msgs, fins;	/* control messages */
	uint64_t unknown_ctl;		/* for a request we do not hold (done, expired) */
	uint64_t foreign;		/* wrong qkey, or not gfcc at all */
	uint64_t bad_ctl;		/* control messages the decoder refused */
	uint64_t expired, evicted;
	uint64_t states, state_mem;	/* now */
};

struct ibc_srv;
/* NULL (errno EINVAL, ENOMEM) when the config is out of range. */
struct ibc_srv *ibc_srv_new(const struct ibc_srv_cfg *c, ibc_srv_read_fn rd, void *ctx);
void ibc_srv_free(struct ibc_srv *s);		/* NULL ok */

/* One datagram from `peer`.  Returns 0 when it was taken, or the negative
 * errno of why it was dropped or refused (a counter says so too). */
int ibc_srv_input(struct ibc_srv *s, void *peer, const void *buf, size_t len, uint64_t now);

/* A datagram to send: hdr (hlen bytes: the UDP segment header, or none)
 * then buf; over UD with Q_Key qkey. */
struct ibc_out {
	void *peer;
	uint8_t hdr[GFCC_DSEG_LEN];
	uint32_t hlen;
	const uint8_t *buf;
	uint32_t len;
	uint32_t qkey;
	/* the engine's */
	void *st;
	uint32_t seg;
	bool resend;
};
/* Up to max datagrams ready to go, the requests taking turns, as far as
 * their credits allow.  They count as sent; give back the ones that could
 * not go with ibc_srv_unsent().  The buffers stay valid until the next
 * call into the engine. */
int ibc_srv_pump(struct ibc_srv *s, struct ibc_out *out, int max, uint64_t now);
/* out[0..n): the tail of the last pump that did not go out. */
void ibc_srv_unsent(struct ibc_srv *s, const struct ibc_out *out, int n);
/* True when a pump would produce something. */
bool ibc_srv_busy(const struct ibc_srv *s);

/* Frees requests idle for ttl.  Returns when to call it next (absolute
 * ns), UINT64_MAX when nothing is held. */
uint64_t ibc_srv_timer(struct ibc_srv *s, uint64_t now);

void ibc_srv_get_stats(const struct ibc_srv *s, struct ibc_srv_stats *st);

#endif
