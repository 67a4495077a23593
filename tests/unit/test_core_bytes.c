#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "core/bytes.h"

/* Every length around the inline words and the library fallback, at every
 * misalignment of source and destination: the bytes copied and nothing
 * around them. */
static void test_copy_short(void **state)
{
	uint8_t src[160], dst[160], want[160];

	(void)state;
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)(i * 37 + 11);
	for (size_t n = 0; n <= 80; n++) {
		for (size_t so = 0; so < 8; so++) {
			for (size_t dof = 0; dof < 8; dof++) {
				memset(dst, 0xa5, sizeof(dst));
				memset(want, 0xa5, sizeof(want));
				memcpy(want + dof, src + so, n);
				copy_short(dst + dof, src + so, n);
				if (memcmp(dst, want, sizeof(dst)))
					fail_msg("copy_short n=%zu src+%zu dst+%zu", n, so, dof);
			}
		}
	}
}

/* Equal for equal bytes; unequal for a difference at any position, in the
 * 8-byte words, in the tail, and past the inline limit. */
static void test_equal_short(void **state)
{
	uint8_t a[160], b[160];

	(void)state;
	for (size_t i = 0; i < sizeof(a); i++)
		a[i] = b[i] = (uint8_t)(i * 13 + 5);
	for (size_t n = 0; n <= 80; n++) {
		for (size_t off = 0; off < 4; off++) {
			assert_true(equal_short(a + off, b + off, n));
			for (size_t k = 0; k < n; k++) {
				b[off + k] ^= 0x40;
				if (equal_short(a + off, b + off, n))
					fail_msg("equal_short n=%zu off=%zu: difference at %zu missed", n,
						 off, k);
				b[off + k] ^= 0x40;
			}
		}
	}
	/* bytes past n are not compared */
	b[10] ^= 1;
	assert_true(equal_short(a, b, 10));
	assert_false(equal_short(a, b, 11));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_copy_short),
		cmocka_unit_test(test_equal_short),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
