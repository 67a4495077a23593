/* Ring indices.  `v % n` is a division, which emulation (and small cores)
 * pay dearly for on every message; the depths of our rings are powers of
 * two nearly always, where a mask does. */
#ifndef XPRT_CORE_RING_H
#define XPRT_CORE_RING_H

#include <stdint.h>

static inline uint32_t xring_slot(uint64_t v, uint32_t n)
{
	return (n & (n - 1)) == 0 ? (uint32_t)(v & (n - 1)) : (uint32_t)(v % n);
}

#endif
