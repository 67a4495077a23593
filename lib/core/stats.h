/* Counters and latency histograms (after the kernel's rtrs-clt-stats.c:
 * a table describes the counters; to_node and reset walk the table). */
#ifndef XPRT_CORE_STATS_H
#define XPRT_CORE_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "core/node.h"

/* Log-linear buckets, as in HdrHistogram: values below 2^7 are exact, every
 * power of two above is split into 128 equal buckets, so a bucket is at most
 * 1/128 (0.78%) of its values wide.  2^42 ns (73 minutes) and above land in
 * the last bucket; min and max stay exact.  Buckets saturate at UINT32_MAX,
 * which keeps the struct at 18 KiB so it can live on a stack or per thread. */
#define XHIST_SUB_BITS 7
#define XHIST_MAX_BITS 42
#define XHIST_BUCKETS  ((XHIST_MAX_BITS - XHIST_SUB_BITS + 1) << XHIST_SUB_BITS)

struct xhist {
	uint64_t count, sum, min, max;
	uint32_t b[XHIST_BUCKETS];
};

void xhist_reset(struct xhist *h);
void xhist_add(struct xhist *h, uint64_t ns);
void xhist_merge(struct xhist *dst, const struct xhist *src);
/* Value at percentile pct (0..100), the midpoint of its bucket clamped to
 * [min, max]; pct 0 is min and 100 is max.  0 when empty. */
uint64_t xhist_pct(const struct xhist *h, double pct);
double xhist_mean(const struct xhist *h);
/* Sets count, min, avg, p50, p90, p99, p99.9, max (all integers, ns). */
void xhist_to_node(const struct xhist *h, struct xnode *map);

struct xstat_desc {
	const char *name;
	size_t off; /* of a uint64_t or _Atomic uint64_t field */
};
#define XSTAT(type, field) { #field, offsetof(type, field) }

/* Relaxed loads/stores: counters may be bumped by other threads meanwhile. */
void xstats_to_node(const void *base, const struct xstat_desc *d, size_t n, struct xnode *map);
void xstats_reset(void *base, const struct xstat_desc *d, size_t n);

#endif
