#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"

static struct xhist *hist_new(void)
{
	struct xhist *h = malloc(sizeof(*h));

	assert_non_null(h);
	xhist_reset(h);
	return h;
}

/* Within the histogram's promise: half a bucket, i.e. 1/256 of the value,
 * plus one for the exact low range. */
static void assert_near(uint64_t got, uint64_t want)
{
	uint64_t tol = want / 256 + 1;
	uint64_t diff = got > want ? got - want : want - got;

	if (diff > tol)
		fail_msg("got %llu, want %llu +- %llu", (unsigned long long)got,
			 (unsigned long long)want, (unsigned long long)tol);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Exact percentile by the same rank rule: the ceil(p% * n)-th smallest. */
static uint64_t exact_pct(const uint64_t *sorted, size_t n, double pct)
{
	double r = pct / 100.0 * (double)n;
	size_t rank = (size_t)r;

	if ((double)rank < r || rank == 0)
		rank++;
	return sorted[rank - 1];
}

static void test_empty_and_small(void **state)
{
	struct xhist *h = hist_new();

	(void)state;
	assert_true(xhist_pct(h, 50) == 0);
	assert_true(xhist_mean(h) == 0.0);
	xhist_add(h, 5);
	xhist_add(h, 7);
	xhist_add(h, 100);
	/* Below 128 every value has its own bucket. */
	assert_true(xhist_pct(h, 0) == 5);
	assert_true(xhist_pct(h, 33) == 5);
	assert_true(xhist_pct(h, 50) == 7);
	assert_true(xhist_pct(h, 66.6) == 7);
	assert_true(xhist_pct(h, 67) == 100);
	assert_true(xhist_pct(h, 100) == 100);
	assert_true(h->count == 3 && h->sum == 112 && h->min == 5 && h->max == 100);
	assert_true(xhist_mean(h) > 37.33 && xhist_mean(h) < 37.34);

	/* Out of range values are kept in the last bucket; min/max exact. */
	xhist_reset(h);
	xhist_add(h, 7200000000000ull);
	xhist_add(h, UINT64_MAX / 2);
	assert_true(xhist_pct(h, 50) == 7200000000000ull);
	assert_true(xhist_pct(h, 100) == UINT64_MAX / 2);
	xhist_add(h, 0);
	assert_true(xhist_pct(h, 1) == 0);
	free(h);
}

static void test_uniform(void **state)
{
	static const double pcts[] = { 1, 10, 25, 50, 75, 90, 99, 99.9, 99.99 };
	struct xhist *h = hist_new();
	uint64_t *v = malloc(200000 * sizeof(*v));

	(void)state;
	for (uint64_t i = 0; i < 200000; i++) {
		v[i] = i * 37 + 1;
		xhist_add(h, v[i]);
	}
	for (size_t i = 0; i < sizeof(pcts) / sizeof(pcts[0]); i++)
		assert_near(xhist_pct(h, pcts[i]), exact_pct(v, 200000, pcts[i]));
	assert_true(xhist_pct(h, 0) == 1);
	assert_true(xhist_pct(h, 100) == 199999 * 37 + 1);
	free(v);
	free(h);
}

/* Latency-shaped: mostly ~2 us, a long tail out to seconds. */
static void test_long_tail(void **state)
{
	static const double pcts[] = { 50, 90, 99, 99.9, 99.99 };
	struct xhist *h = hist_new();
	size_t n = 300000;
	uint64_t *v = malloc(n * sizeof(*v)), x = 88172645463325252ull;

	(void)state;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13; /* xorshift64: deterministic */
		x ^= x >> 7;
		x ^= x << 17;
		v[i] = 1500 + x % 1000;
		if (i % 100 == 0)
			v[i] = 100000 + x % 10000000;
		if (i % 10000 == 0)
			v[i] = 1000000000 + x % 3000000000ull;
		xhist_add(h, v[i]);
	}
	qsort(v, n, sizeof(*v), cmp_u64);
	for (size_t i = 0; i < sizeof(pcts) / sizeof(pcts[0]); i++)
		assert_near(xhist_pct(h, pcts[i]), exact_pct(v, n, pcts[i]));
	assert_true(h->min == v[0]);
	assert_true(h->max == v[n - 1]);
	free(v);
	free(h);
}

static void test_merge(void **state)
{
	struct xhist *a = hist_new(), *b = hist_new(), *all = hist_new(), *z = hist_new();

	(void)state;
	for (uint64_t i = 1; i < 50000; i++) {
		uint64_t ns = i * i % 9999991;

		xhist_add(i % 3 ? a : b, ns);
		xhist_add(all, ns);
	}
	xhist_merge(a, b);
	assert_memory_equal(a, all, sizeof(*a));
	/* Merging into an empty (even all-zero) histogram keeps min right. */
	memset(z, 0, sizeof(*z));
	xhist_merge(z, b);
	assert_true(z->min == b->min);
	memset(z, 0, sizeof(*z));
	xhist_add(z, 42);
	assert_true(z->min == 42 && z->max == 42);

	/* Buckets saturate instead of wrapping. */
	xhist_reset(a);
	xhist_add(a, 10);
	a->b[10] = UINT32_MAX - 1;
	xhist_add(a, 10);
	xhist_add(a, 10);
	assert_true(a->b[10] == UINT32_MAX);
	xhist_merge(a, a);
	assert_true(a->b[10] == UINT32_MAX);
	free(a);
	free(b);
	free(all);
	free(z);
}

static void test_to_node(void **state)
{
	static const char *const keys[] = { "count", "min", "avg", "p50", "p90", "p99", "p99.9", "max" };
	struct xhist *h = hist_new();
	struct xnode *m = xnode_map();
	const char *key;

	(void)state;
	for (uint64_t i = 1; i <= 100; i++)
		xhist_add(h, i);
	xhist_to_node(h, m);
	assert_int_equal(xnode_len(m), 8);
	for (size_t i = 0; i < 8; i++) {
		assert_int_equal(xnode_type(xnode_at(m, i, &key)), XN_U64);
		assert_string_equal(key, keys[i]);
	}
	assert_true(xnode_u64(xnode_get(m, "count")) == 100);
	assert_true(xnode_u64(xnode_get(m, "min")) == 1);
	assert_true(xnode_u64(xnode_get(m, "avg")) == 51); /* 50.5 rounds up */
	assert_true(xnode_u64(xnode_get(m, "p50")) == 50);
	assert_true(xnode_u64(xnode_get(m, "p90")) == 90);
	assert_true(xnode_u64(xnode_get(m, "p99")) == 99);
	assert_true(xnode_u64(xnode_get(m, "p99.9")) == 100);
	assert_true(xnode_u64(xnode_get(m, "max")) == 100);
	xnode_free(m);

	m = xnode_map();
	xhist_reset(h);
	xhist_to_node(h, m);
	for (size_t i = 0; i < 8; i++)
		assert_true(xnode_u64(xnode_at(m, i, NULL)) == 0);
	xnode_free(m);
	free(h);
}

struct counters {
	uint64_t tx_bytes;
	uint32_t pad;
	_Atomic uint64_t rx_bytes;
	uint64_t errors;
};

static const struct xstat_desc counters_desc[] = {
	XSTAT(struct counters, tx_bytes),
	XSTAT(struct counters, rx_bytes),
	XSTAT(struct counters, errors),
};

static void test_counters(void **state)
{
	struct counters c = { .tx_bytes = 10, .pad = 7, .errors = 2 };
	struct xnode *m = xnode_map();
	const char *key;

	(void)state;
	atomic_store(&c.rx_bytes, 1ull << 40);
	xstats_to_node(&c, counters_desc, 3, m);
	assert_int_equal(xnode_len(m), 3);
	assert_true(xnode_u64(xnode_at(m, 0, &key)) == 10);
	assert_string_equal(key, "tx_bytes");
	assert_true(xnode_u64(xnode_at(m, 1, &key)) == 1ull << 40);
	assert_string_equal(key, "rx_bytes");
	assert_true(xnode_u64(xnode_at(m, 2, &key)) == 2);
	assert_string_equal(key, "errors");
	xnode_free(m);

	xstats_reset(&c, counters_desc, 3);
	assert_true(c.tx_bytes == 0 && atomic_load(&c.rx_bytes) == 0 && c.errors == 0);
	assert_int_equal(c.pad, 7);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty_and_small),
		cmocka_unit_test(test_uniform),
		cmocka_unit_test(test_long_tail),
		cmocka_unit_test(test_merge),
		cmocka_unit_test(test_to_node),
		cmocka_unit_test(test_counters),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
