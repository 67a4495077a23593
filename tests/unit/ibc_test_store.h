/* The page store the ibcache unit tests serve from (an ibc_srv store
 * callback): object INO of generation GEN has pages 0..held-1 (all of them
 * unless a test sets held), byte o of page p being pat(p, o); another
 * generation or the inode STALE is -ESTALE, any other inode -ENOENT.  Its
 * size is store_size (UINT64_MAX: not told). */
#ifndef XPRT_TESTS_IBC_TEST_STORE_H
#define XPRT_TESTS_IBC_TEST_STORE_H

#include <errno.h>
#include <stdint.h>

#include "ibcache/ibc_srv.h"

#define PS	4096u
#define INO	1u
#define GEN	7u
#define STALE	2u

static uint64_t held = UINT64_MAX;
static uint64_t store_size = UINT64_MAX;

static uint8_t pat(uint64_t page, uint32_t off)
{
	return (uint8_t)(page * 131 + off * 3 + (off >> 9) + 1);
}

static int store(void *ctx, const struct gfcc_req *q, uint8_t *buf, uint64_t now, uint64_t *size)
{
	uint32_t n = 0;

	(void)ctx;
	(void)now;
	*size = store_size;
	if (q->obj.ino == STALE || (q->obj.ino == INO && q->obj.gen != GEN))
		return -ESTALE;
	if (q->obj.ino != INO)
		return -ENOENT;
	for (uint32_t b = 0; b < q->npblk; b++)
		for (uint64_t p = q->pblk[b].index; p < q->pblk[b].index + q->pblk[b].count; p++) {
			if (p >= held)
				return (int)n;
			for (uint32_t o = 0; o < q->psize; o++)
				buf[(size_t)n * q->psize + o] = pat(p, o);
			n++;
		}
	return (int)n;
}

#endif
