/* Clock helpers.  CLOCK_MONOTONIC for intervals and deadlines (never jumps),
 * CLOCK_REALTIME only for wall-clock stamps shown to humans. */
#ifndef XPRT_CORE_XTIME_H
#define XPRT_CORE_XTIME_H

#include <stdint.h>
#include <time.h>

#define XTIME_NS_PER_US 1000ull
#define XTIME_NS_PER_MS 1000000ull
#define XTIME_NS_PER_S  1000000000ull

static inline uint64_t xtime_ns(void)
{
	struct timespec ts;

	/* Cannot fail with a valid clock id and pointer. */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * XTIME_NS_PER_S + (uint64_t)ts.tv_nsec;
}

static inline uint64_t xtime_real_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * XTIME_NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* t + d, or UINT64_MAX where that would wrap: a deadline of "never"
 * (UINT64_MAX as a duration) stays never instead of passing at once. */
static inline uint64_t xtime_after(uint64_t t, uint64_t d)
{
	return d > UINT64_MAX - t ? UINT64_MAX : t + d;
}

#endif
