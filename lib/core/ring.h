/* Ring indices.  A ring is allocated with xring_cap(n) slots -- n rounded
 * up to a power of two -- and indexed `v & (cap - 1)`: `v % n` is an
 * integer division (20-40 cycles on x86-64) on every message.  The ring
 * holds at most n entries; the extra slots are never in use at once. */
#ifndef XPRT_CORE_RING_H
#define XPRT_CORE_RING_H

#include <stdint.h>

/* The least power of two >= n (1 for n <= 1; n <= 2^31). */
static inline uint32_t xring_cap(uint32_t n)
{
	return n <= 1 ? 1 : 1u << (32 - __builtin_clz(n - 1));
}

/* The greatest power of two <= n (0 for 0). */
static inline uint32_t xring_floor(uint32_t n)
{
	return n ? 1u << (31 - __builtin_clz(n)) : 0;
}

#endif
