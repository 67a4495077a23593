/* RTRS heartbeats, sans I/O (the kernel's rtrs.c hb_work, on both sides).
 *
 * Every `interval`, a side that has heard from its peer since the last
 * tick sends an HB_MSG (a zero-length RDMA write with immediate
 * RTRS_IMM_HB_MSG on connection 0); the peer answers HB_ACK.  Anything
 * received resets the missed count; every tick raises it; a tick that finds
 * it above `missed_max` declares the path dead.  With the kernel's defaults
 * (5000 ms, 5) a silent peer is noticed about 30 s after the last beat.
 * The time from HB_MSG to its HB_ACK is the path latency (min-latency
 * multipath policy, `cur_latency` in the status output).
 *
 * Kernel detail kept: a beat is only sent on a tick that finds the missed
 * count at 0 (`if (hb_missed_cnt++) ... else send`), so an unanswered beat
 * is not repeated every interval.
 */
#ifndef XPRT_RTRS_HB_H
#define XPRT_RTRS_HB_H

#include <stdint.h>

struct rtrs_hb {
	uint64_t interval_ns;
	uint64_t next_ns;	/* the next tick */
	uint64_t sent_ns;	/* when the last HB_MSG went out, 0 = none pending */
	int64_t latency_ns;	/* last round trip, -1 = none measured yet */
	uint32_t missed, missed_max;
};

enum rtrs_hb_action {
	RTRS_HB_IDLE,		/* nothing to do now */
	RTRS_HB_SEND,		/* post an HB_MSG now */
	RTRS_HB_DEAD,		/* peer silent for too long: close the path */
};

/* interval_ms 0 = 5000, missed_max 0 = 5 (the kernel's defaults). */
void rtrs_hb_init(struct rtrs_hb *hb, uint32_t interval_ms, uint32_t missed_max, uint64_t now);
/* Anything arrived from the peer (the kernel resets on every receive). */
static inline void rtrs_hb_heard(struct rtrs_hb *hb) { hb->missed = 0; }
/* An HB_ACK arrived: the round trip of the last beat is the latency. */
void rtrs_hb_acked(struct rtrs_hb *hb, uint64_t now);
/* Call whenever now >= rtrs_hb_next(); says what to do. */
enum rtrs_hb_action rtrs_hb_tick(struct rtrs_hb *hb, uint64_t now);
static inline uint64_t rtrs_hb_next(const struct rtrs_hb *hb) { return hb->next_ns; }
/* The longest a silent peer goes unnoticed: the last thing heard just
 * after a tick, then missed_max + 2 ticks until one finds the count
 * above missed_max (35 s with the defaults).  Same 0 defaults as init;
 * no overflow within the options' limits (an hour, 1000 beats). */
uint64_t rtrs_hb_detect_ns(uint32_t interval_ms, uint32_t missed_max);

#endif
