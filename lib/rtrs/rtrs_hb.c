/* RTRS heartbeat state machine: see rtrs_hb.h. */
#include "rtrs/rtrs_hb.h"

#include "rtrs/rtrs_wire.h"

void rtrs_hb_init(struct rtrs_hb *hb, uint32_t interval_ms, uint32_t missed_max, uint64_t now)
{
	hb->interval_ns = (uint64_t)(interval_ms ? interval_ms : RTRS_HB_INTERVAL_MS) * 1000000ull;
	hb->missed_max = missed_max ? missed_max : RTRS_HB_MISSED_MAX;
	hb->missed = 0;
	hb->sent_ns = 0;
	hb->latency_ns = -1;
	hb->next_ns = now + hb->interval_ns;
}

uint64_t rtrs_hb_detect_ns(uint32_t interval_ms, uint32_t missed_max)
{
	uint64_t i = (uint64_t)(interval_ms ? interval_ms : RTRS_HB_INTERVAL_MS) * 1000000ull;

	return ((missed_max ? missed_max : RTRS_HB_MISSED_MAX) + 2ull) * i;
}

void rtrs_hb_acked(struct rtrs_hb *hb, uint64_t now)
{
	hb->missed = 0;
	if (hb->sent_ns && now >= hb->sent_ns)
		hb->latency_ns = (int64_t)(now - hb->sent_ns);
	hb->sent_ns = 0;
}

enum rtrs_hb_action rtrs_hb_tick(struct rtrs_hb *hb, uint64_t now)
{
	if (now < hb->next_ns)
		return RTRS_HB_IDLE;
	/* a loop that woke late does not owe the ticks it slept through */
	hb->next_ns = now + hb->interval_ns;
	if (hb->missed > hb->missed_max)
		return RTRS_HB_DEAD;
	if (hb->missed++)
		return RTRS_HB_IDLE;
	hb->sent_ns = now;
	return RTRS_HB_SEND;
}
