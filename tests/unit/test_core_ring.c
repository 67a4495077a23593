#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/ring.h"

/* xring_cap: the least power of two >= n, against a plain loop, at every
 * power of two and its neighbours up to 2^31. */
static void test_cap(void **state)
{
	(void)state;
	assert_int_equal(xring_cap(0), 1);
	assert_int_equal(xring_cap(1), 1);
	for (unsigned b = 1; b <= 31; b++) {
		uint32_t p = 1u << b;

		for (uint32_t n = p - 1; n <= p + 1 && n >= p - 1; n++) {
			uint32_t want = 1;

			while (want < n && want < (1u << 31))
				want <<= 1;
			if (n > (1u << 31))
				continue;	/* out of the documented range */
			assert_int_equal(xring_cap(n), want);
		}
	}
}

/* xring_floor: the greatest power of two <= n. */
static void test_floor(void **state)
{
	static const uint32_t cases[][2] = {
		{ 0, 0 }, { 1, 1 }, { 3, 2 }, { 128, 128 }, { 129, 128 }, { 255, 128 },
		{ UINT32_MAX, 1u << 31 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(xring_floor(cases[i][0]), cases[i][1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cap),
		cmocka_unit_test(test_floor),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
