/* Ring indices.  A ring is allocated with xring_cap(n) slots -- n rounded
 * up to a power of two -- and indexed `v & (cap - 1)`: `v % n` is a
 * division, which emulation (and small cores) pay dearly for on every
 * message, and choosing between the two per index is a branch per index
 * (each distinct branch on a message's path costs ~20 ns under qemu's TCG,
 * bench/README.md).  The ring holds at most n entries; the extra slots
 * are never in use at once. */
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
