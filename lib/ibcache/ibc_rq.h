/* One gfcc request as the requester sees it, sans I/O (seed 004 3.3.2
 * "rpc 要求送信", 3.3.4 "rpc データ受信完了", 3.3.6 "rpc 応答待ちタイマ処理").
 * The caller sends what it is told to, feeds what arrives, and runs the
 * timer; this decides when the request is over and which pages are good.
 *
 *   UDP   every datagram carries its segment index: pages are good as
 *         soon as their segments are in, in any order.  Credits (the
 *         window, xprt's extension): after each quarter window of
 *         arrivals a CREDIT with allow = window + arrived + asked, so the
 *         responder never has more than a window in flight; when the last
 *         segment is in but holes remain, or nothing arrived for rto, a
 *         selective RESEND names the missing segments (asked grows by as
 *         many); nothing at all after rto: the request again (it may have
 *         been lost) with a RESEND of the first window (it may not).  rto
 *         doubles while nothing comes, up to timeout / 8.  Silence is the
 *         responder's: once it has answered, while it sends to the
 *         caller's other requests this one waits its turn (up to 3 rto
 *         more) before asking again.
 *         Done: FIN, so the responder frees the request at once (none for
 *         a reply of one datagram: the responder keeps nothing for
 *         those).
 *   UD    gfarm's positional scatter: the reply counts only whole
 *         (gfcc_seg.h), nothing is asked again on the same QP (a second
 *         copy would interleave with the first in the posted buffers).
 *
 * Reaping (gfarm: 3 minutes, delayed_work at twice that): a request not
 * complete after timeout ends with -ETIMEDOUT; over UDP the pages already
 * whole stay good. */
#ifndef XPRT_IBCACHE_IBC_RQ_H
#define XPRT_IBCACHE_IBC_RQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ibcache/gfcc_seg.h"

struct ibc_rq_cfg {
	uint64_t id;
	uint32_t qkey;			/* random per request */
	struct gfcc_obj obj;		/* ino, gen; off/len are filled from the pages */
	uint32_t psize;
	const uint64_t *pages;		/* strictly ascending page numbers */
	uint32_t npages;
	uint32_t max_pblk;		/* blocks that fit the peer's MTU */
	uint32_t max_pages;		/* 0: gfcc_max_pages(psize) */
	enum gfcc_flavour flavour;	/* GFCC_UDP or GFCC_UD */
	bool placed;			/* UD: receives posted into the pages */
	uint32_t seglen;
	uint32_t window;		/* UDP: datagrams in flight (>= 1) */
	uint8_t *const *dst;		/* UDP / UD copy: a buffer per page taken */
	uint64_t rto_ns, timeout_ns;
	uint64_t now;
};

enum ibc_rq_state { IBC_RQ_WAIT = 0, IBC_RQ_DONE = 1, IBC_RQ_FAILED = 2 };

/* ibc_rq_init clears req's head, ra, and state up to dst: a new field
 * goes between state and dst, and dst stays last. */
struct ibc_rq {
	struct gfcc_req req;
	struct gfcc_reasm ra;
	enum ibc_rq_state state;
	int err;			/* DONE: the responder's error (errno) or 0;
					 * FAILED: -ETIMEDOUT or what the caller set */
	enum gfcc_flavour flavour;
	uint32_t window;
	uint64_t asked;			/* segments named in RESENDs */
	uint64_t credit_at;		/* arrivals when the last allow went out */
	uint64_t t_start, t_progress, rto, rto_base, rto_max, deadline;
	uint64_t t_first;		/* first arrival: the round trip */
	uint32_t retries;		/* request or RESEND rounds after silence */
	uint32_t fast_resends;
	uint32_t credits;		/* CREDIT messages */
	uint8_t *dst[GFCC_PAGES_MAX];
};
_Static_assert(sizeof(struct ibc_rq) - sizeof(((struct ibc_rq *)0)->dst) ==
		       __builtin_offsetof(struct ibc_rq, dst),
	       "dst is ibc_rq's last field");

/* What the caller sends to the responder's public endpoint. */
#define IBC_RQ_CTL_MAX 4
struct ibc_rq_out {
	bool request;			/* the request again */
	int n;
	uint32_t len[IBC_RQ_CTL_MAX];
	uint8_t msg[IBC_RQ_CTL_MAX][GFCC_X_MAX];
};

/* Takes the first pages of cfg->pages that fit one request (limits, MTU)
 * and starts the clock.  Returns how many (>= 1) or -EINVAL. */
int ibc_rq_init(struct ibc_rq *r, const struct ibc_rq_cfg *c);
/* The encoded request (to the responder's public endpoint). */
int ibc_rq_encode(const struct ibc_rq *r, uint8_t *buf, size_t cap);
static inline uint32_t ibc_rq_npages(const struct ibc_rq *r) { return r->req.npage; }

/* One datagram on the request's socket (UDP: all of it) or UD copy mode
 * (the payload).  Returns gfcc_reasm_input()'s result; *out what to send. */
int ibc_rq_input(struct ibc_rq *r, const void *buf, size_t len, uint64_t now,
		 struct ibc_rq_out *out);
/* UDP with the payload already in place (gfcc_reasm_input_hdr): hdr the
 * segment header, len the datagram's length, res the response. */
int ibc_rq_input_hdr(struct ibc_rq *r, const void *hdr, size_t len, const void *res,
		     uint64_t now, struct ibc_rq_out *out);
/* UD placed: the next receive completed with len payload bytes; res is
 * the response buffer of the first one. */
int ibc_rq_placed(struct ibc_rq *r, size_t len, const void *res, uint64_t now);
/* The transport failed the request (a closed port, a receive error). */
void ibc_rq_fail(struct ibc_rq *r, int err, struct ibc_rq_out *out);
/* Retransmits and reaping; call at ibc_rq_next_timer().  heard: when the
 * responder last sent the caller a datagram, for any request (0: not
 * known); while it does, silence on a request it has answered is taken
 * for its turn coming, for up to three rto more. */
void ibc_rq_timer(struct ibc_rq *r, uint64_t now, uint64_t heard, struct ibc_rq_out *out);
uint64_t ibc_rq_next_timer(const struct ibc_rq *r, uint64_t heard);

/* Page i of the request (0..npages) came through whole. */
bool ibc_rq_page_ok(const struct ibc_rq *r, uint32_t i);
/* Pages the reply announced (its npage), once known. */
static inline uint32_t ibc_rq_reply_pages(const struct ibc_rq *r)
{
	return r->ra.known ? r->ra.lay.npage : 0;
}
/* Every posted receive was consumed (UD: else the QP needs a reset). */
bool ibc_rq_clean(const struct ibc_rq *r);

#endif
