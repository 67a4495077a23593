/* When a poll loop sleeps (the servers', ibcache's requester): it
 * busy-polls for spin_ns after the last round that did work (a reply is
 * usually a round trip away, and a sleep costs a wake-up of tens of
 * microseconds), then sleeps until something comes.  Each loop still
 * decides what counts as work and how it sleeps. */
#ifndef XPRT_CORE_SPIN_H
#define XPRT_CORE_SPIN_H

#include <stdbool.h>
#include <stdint.h>

struct xspin {
	uint64_t spin_ns;
	uint64_t idle_since;		/* the last round that did work */
};

static inline void xspin_init(struct xspin *s, uint64_t spin_ns, uint64_t now)
{
	s->spin_ns = spin_ns;
	s->idle_since = now;
}

/* A round at now did work (or not): whether to go round again at once
 * rather than sleep. */
static inline bool xspin_again(struct xspin *s, uint64_t now, bool work)
{
	if (work) {
		s->idle_since = now;
		return true;
	}
	return now - s->idle_since < s->spin_ns;
}

/* After a sleep at now: spin again when it brought something (or always,
 * for a loop whose wake-ups are all worth a spin); else sleep again as
 * soon as a round finds nothing. */
static inline void xspin_woke(struct xspin *s, uint64_t now, bool spin)
{
	s->idle_since = spin ? now : now - s->spin_ns;
}

#endif
