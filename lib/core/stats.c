#include "core/stats.h"
#include "core/cc.h"

#include <string.h>

#define SUB (1u << XHIST_SUB_BITS)

_Static_assert(sizeof(struct xhist) < 32 * 1024, "xhist must stay small");

XINLINE unsigned bucket_of(uint64_t v)
{
	unsigned e, sh;

	if (v >= (1ull << XHIST_MAX_BITS))
		v = (1ull << XHIST_MAX_BITS) - 1;
	e = 63u - (unsigned)__builtin_clzll(v | 1);
	/* sh = max(e, SUB_BITS) - SUB_BITS, without a branch. */
	sh = (e > XHIST_SUB_BITS) * (e - XHIST_SUB_BITS);
	return (sh << XHIST_SUB_BITS) + (unsigned)(v >> sh);
}

static void bucket_range(unsigned i, uint64_t *lo, uint64_t *width)
{
	unsigned sh = i < 2 * SUB ? 0 : (i >> XHIST_SUB_BITS) - 1;

	*lo = (uint64_t)(i - (sh << XHIST_SUB_BITS)) << sh;
	*width = 1ull << sh;
}

void xhist_reset(struct xhist *h)
{
	memset(h, 0, sizeof(*h));
	h->min = UINT64_MAX;
}

XHOT_INLINE void xhist_add(struct xhist *h, uint64_t ns)
{
	uint32_t *b = &h->b[bucket_of(ns)];

	*b += *b != UINT32_MAX;
	/* Testing count too makes a zero-initialised struct usable. */
	h->min = ns < h->min || h->count == 0 ? ns : h->min;
	h->max = ns > h->max ? ns : h->max;
	h->count++;
	h->sum += ns;
}

void xhist_merge(struct xhist *dst, const struct xhist *src)
{
	for (unsigned i = 0; i < XHIST_BUCKETS; i++) {
		uint64_t s = (uint64_t)dst->b[i] + src->b[i];

		dst->b[i] = s > UINT32_MAX ? UINT32_MAX : (uint32_t)s;
	}
	if (src->count && (src->min < dst->min || dst->count == 0))
		dst->min = src->min;
	dst->count += src->count;
	dst->sum += src->sum;
	if (src->max > dst->max)
		dst->max = src->max;
}

uint64_t xhist_pct(const struct xhist *h, double pct)
{
	uint64_t total = 0, rank, cum = 0, lo, width, v;
	double r;

	if (h->count == 0)
		return 0;
	if (!(pct > 0))
		return h->min;
	if (pct >= 100)
		return h->max;
	/* Saturated buckets make count unreliable; rank by what is stored. */
	for (unsigned i = 0; i < XHIST_BUCKETS; i++)
		total += h->b[i];
	r = pct / 100.0 * (double)total;
	rank = (uint64_t)r;
	if ((double)rank < r || rank == 0)
		rank++;
	for (unsigned i = 0; i < XHIST_BUCKETS; i++) {
		cum += h->b[i];
		if (cum >= rank) {
			bucket_range(i, &lo, &width);
			v = lo + (width - 1) / 2;
			if (v < h->min)
				v = h->min;
			if (v > h->max)
				v = h->max;
			return v;
		}
	}
	return h->max;
}

double xhist_mean(const struct xhist *h)
{
	return h->count ? (double)h->sum / (double)h->count : 0.0;
}

void xhist_to_node(const struct xhist *h, struct xnode *map)
{
	static const struct {
		const char *key;
		double pct;
	} pcts[] = { { "p50", 50 }, { "p90", 90 }, { "p99", 99 }, { "p99.9", 99.9 } };

	xnode_set_u64(map, "count", h->count);
	xnode_set_u64(map, "min", h->count ? h->min : 0);
	xnode_set_u64(map, "avg", (uint64_t)(xhist_mean(h) + 0.5));
	for (size_t i = 0; i < sizeof(pcts) / sizeof(pcts[0]); i++)
		xnode_set_u64(map, pcts[i].key, xhist_pct(h, pcts[i].pct));
	xnode_set_u64(map, "max", h->max);
}

void xstats_to_node(const void *base, const struct xstat_desc *d, size_t n, struct xnode *map)
{
	for (size_t i = 0; i < n; i++) {
		const uint64_t *p = (const uint64_t *)((const char *)base + d[i].off);

		xnode_set_u64(map, d[i].name, __atomic_load_n(p, __ATOMIC_RELAXED));
	}
}

void xstats_reset(void *base, const struct xstat_desc *d, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t *p = (uint64_t *)((char *)base + d[i].off);

		__atomic_store_n(p, 0, __ATOMIC_RELAXED);
	}
}
