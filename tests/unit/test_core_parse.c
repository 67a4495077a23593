#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/parse.h"

static void check_u64(const char *s, uint64_t min, uint64_t max, const char *why, uint64_t want)
{
	const char *err = "unset";
	uint64_t v = 12345;
	int r = xparse_u64(s, min, max, &v, &err);

	if (!why) {
		assert_int_equal(r, 0);
		assert_null(err);
		assert_true(v == want);
	} else {
		assert_int_equal(r, -1);
		assert_string_equal(err, why);
		assert_true(v == 12345); /* untouched on error */
	}
}

static void test_u64(void **state)
{
	(void)state;
	check_u64("0", 0, 10, NULL, 0);
	check_u64("10", 0, 10, NULL, 10);
	check_u64("007", 0, 10, NULL, 7); /* not octal */
	check_u64("18446744073709551615", 0, UINT64_MAX, NULL, UINT64_MAX);
	check_u64("18446744073709551616", 0, UINT64_MAX, "too large", 0);
	check_u64("99999999999999999999999", 0, UINT64_MAX, "too large", 0);
	check_u64("99999999999999999999999x", 0, UINT64_MAX, "invalid", 0);
	check_u64("11", 0, 10, "too large", 0);
	check_u64("4", 5, 10, "too small", 0);
	check_u64("", 0, 10, "invalid", 0);
	check_u64(" 1", 0, 10, "invalid", 0);
	check_u64("1 ", 0, 10, "invalid", 0);
	check_u64("1\n", 0, 10, "invalid", 0);
	check_u64("+1", 0, 10, "invalid", 0);
	check_u64("-1", 0, 10, "invalid", 0);
	check_u64("0x10", 0, 100, "invalid", 0);
	check_u64("1k", 0, 10000, "invalid", 0);
	check_u64(NULL, 0, 10, "invalid", 0);
}

static void check_i64(const char *s, int64_t min, int64_t max, const char *why, int64_t want)
{
	const char *err = "unset";
	int64_t v = 12345;
	int r = xparse_i64(s, min, max, &v, &err);

	if (!why) {
		assert_int_equal(r, 0);
		assert_true(v == want);
	} else {
		assert_int_equal(r, -1);
		assert_string_equal(err, why);
		assert_true(v == 12345);
	}
}

static void test_i64(void **state)
{
	(void)state;
	check_i64("-5", -10, 10, NULL, -5);
	check_i64("+5", -10, 10, NULL, 5);
	check_i64("-0", -10, 10, NULL, 0);
	check_i64("-9223372036854775808", INT64_MIN, INT64_MAX, NULL, INT64_MIN);
	check_i64("9223372036854775807", INT64_MIN, INT64_MAX, NULL, INT64_MAX);
	check_i64("9223372036854775808", INT64_MIN, INT64_MAX, "too large", 0);
	check_i64("-9223372036854775809", INT64_MIN, INT64_MAX, "too small", 0);
	check_i64("-99999999999999999999", INT64_MIN, INT64_MAX, "too small", 0);
	check_i64("-11", -10, 10, "too small", 0);
	check_i64("11", -10, 10, "too large", 0);
	check_i64("-", -10, 10, "invalid", 0);
	check_i64("--1", -10, 10, "invalid", 0);
	check_i64(" -1", -10, 10, "invalid", 0);
	check_i64("1.0", -10, 10, "invalid", 0);
}

static void check_size(const char *s, const char *why, uint64_t want)
{
	const char *err = "unset";
	uint64_t v = 12345;
	int r = xparse_size(s, 0, UINT64_MAX, &v, &err);

	if (!why) {
		assert_int_equal(r, 0);
		assert_true(v == want);
	} else {
		assert_int_equal(r, -1);
		assert_string_equal(err, why);
	}
}

static void test_size(void **state)
{
	const char *err;
	uint64_t v;

	(void)state;
	check_size("4096", NULL, 4096);
	check_size("4k", NULL, 4096);
	check_size("4K", NULL, 4096);
	check_size("4KiB", NULL, 4096);
	check_size("4kB", NULL, 4096);
	check_size("4Ki", NULL, 4096);
	check_size("4B", NULL, 4);
	check_size("0", NULL, 0);
	check_size("1m", NULL, 1ull << 20);
	check_size("2G", NULL, 2ull << 30);
	check_size("3TiB", NULL, 3ull << 40);
	check_size("0x10", NULL, 16);
	check_size("0X10k", NULL, 16 << 10);
	check_size("0x1B", NULL, 27);
	check_size("16777215T", NULL, 16777215ull << 40);
	check_size("16777216T", "too large", 0);
	check_size("18446744073709551615", NULL, UINT64_MAX);
	check_size("18446744073709551616", "too large", 0);
	check_size("4kb", "invalid", 0);
	check_size("4KIB", "invalid", 0);
	check_size("4KK", "invalid", 0);
	check_size("4P", "invalid", 0);
	check_size("4 k", "invalid", 0);
	check_size("k", "invalid", 0);
	check_size("0x", "invalid", 0);
	check_size("-4k", "invalid", 0);
	check_size("", "invalid", 0);
	check_size("1.5k", "invalid", 0);
	assert_int_equal(xparse_size("8k", 0, 4096, &v, &err), -1);
	assert_string_equal(err, "too large");
	assert_int_equal(xparse_size("1k", 2048, 4096, &v, &err), -1);
	assert_string_equal(err, "too small");
}

static void check_dur(const char *s, uint64_t bare, const char *why, uint64_t want)
{
	const char *err = "unset";
	uint64_t v = 12345;
	int r = xparse_duration(s, bare, 0, UINT64_MAX, &v, &err);

	if (!why) {
		assert_int_equal(r, 0);
		assert_true(v == want);
	} else {
		assert_int_equal(r, -1);
		assert_string_equal(err, why);
	}
}

static void test_duration(void **state)
{
	const char *err;
	uint64_t v;

	(void)state;
	check_dur("5ns", 0, NULL, 5);
	check_dur("5us", 0, NULL, 5000);
	check_dur("5ms", 0, NULL, 5000000);
	check_dur("5s", 0, NULL, 5000000000ull);
	check_dur("2m", 0, NULL, 120000000000ull);
	check_dur("1h", 0, NULL, 3600000000000ull);
	check_dur("1.5ms", 0, NULL, 1500000);
	check_dur("0.25s", 0, NULL, 250000000);
	check_dur("1.0000000001s", 0, NULL, 1000000000);
	check_dur("0.5ns", 0, NULL, 0);
	check_dur("250", 1000000, NULL, 250000000);
	check_dur("250", 0, "invalid", 0);
	check_dur("1.5", 1000000000, NULL, 1500000000);
	check_dur("5 ms", 0, "invalid", 0);
	check_dur("5sec", 0, "invalid", 0);
	check_dur("5S", 0, "invalid", 0);
	check_dur(".5s", 0, "invalid", 0);
	check_dur("5.s", 0, "invalid", 0);
	check_dur("-1s", 0, "invalid", 0);
	check_dur("ms", 0, "invalid", 0);
	check_dur("18446744073709551615ns", 0, NULL, UINT64_MAX);
	check_dur("18446744073709551616ns", 0, "too large", 0);
	check_dur("5124096h", 0, "too large", 0);
	assert_int_equal(xparse_duration("2s", 0, 0, 1000000000, &v, &err), -1);
	assert_string_equal(err, "too large");
	assert_int_equal(xparse_duration("1us", 0, 1000000, 1000000000, &v, &err), -1);
	assert_string_equal(err, "too small");
}

static void test_bool(void **state)
{
	static const char *const t[] = { "on", "yes", "true", "1", "ON", "Yes", "TRUE" };
	static const char *const f[] = { "off", "no", "false", "0", "Off", "NO" };
	const char *err;
	bool b;

	(void)state;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		b = false;
		assert_int_equal(xparse_bool(t[i], &b, &err), 0);
		assert_true(b);
	}
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
		b = true;
		assert_int_equal(xparse_bool(f[i], &b, &err), 0);
		assert_false(b);
	}
	assert_int_equal(xparse_bool("2", &b, &err), -1);
	assert_string_equal(err, "invalid");
	assert_int_equal(xparse_bool("", &b, &err), -1);
	assert_int_equal(xparse_bool(" yes", &b, &err), -1);
	assert_int_equal(xparse_bool("y", &b, &err), -1);
}

static void test_fmt(void **state)
{
	char buf[32];

	(void)state;
	assert_string_equal(xfmt_size(0, buf, sizeof(buf)), "0 B");
	assert_string_equal(xfmt_size(1023, buf, sizeof(buf)), "1023 B");
	assert_string_equal(xfmt_size(1024, buf, sizeof(buf)), "1 KiB");
	assert_string_equal(xfmt_size(1536, buf, sizeof(buf)), "1.5 KiB");
	assert_string_equal(xfmt_size(1100, buf, sizeof(buf)), "1.07 KiB");
	assert_string_equal(xfmt_size(65536, buf, sizeof(buf)), "64 KiB");
	assert_string_equal(xfmt_size(3ull << 19, buf, sizeof(buf)), "1.5 MiB");
	assert_string_equal(xfmt_size((1ull << 20) - 1, buf, sizeof(buf)), "1 MiB");
	assert_string_equal(xfmt_size(5ull << 40, buf, sizeof(buf)), "5 TiB");
	assert_string_equal(xfmt_size(UINT64_MAX, buf, sizeof(buf)), "16 EiB");

	assert_string_equal(xfmt_rate(0, buf, sizeof(buf)), "0 B/s");
	assert_string_equal(xfmt_rate(999, buf, sizeof(buf)), "999 B/s");
	assert_string_equal(xfmt_rate(1000, buf, sizeof(buf)), "1.00 kB/s");
	assert_string_equal(xfmt_rate(1e6, buf, sizeof(buf)), "1.00 MB/s");
	assert_string_equal(xfmt_rate(12.345e9, buf, sizeof(buf)), "12.35 GB/s");
	assert_string_equal(xfmt_rate(999999, buf, sizeof(buf)), "1.00 MB/s");
	assert_string_equal(xfmt_rate(-1, buf, sizeof(buf)), "- B/s");

	assert_string_equal(xfmt_duration(0, buf, sizeof(buf)), "0 ns");
	assert_string_equal(xfmt_duration(850, buf, sizeof(buf)), "850 ns");
	assert_string_equal(xfmt_duration(1250, buf, sizeof(buf)), "1.25 us");
	assert_string_equal(xfmt_duration(3400000, buf, sizeof(buf)), "3.40 ms");
	assert_string_equal(xfmt_duration(2000000000, buf, sizeof(buf)), "2.00 s");
	assert_string_equal(xfmt_duration(999999, buf, sizeof(buf)), "1.00 ms");
	assert_string_equal(xfmt_duration(3600000000000ull, buf, sizeof(buf)), "3600.00 s");

	/* Truncates, never overflows. */
	assert_string_equal(xfmt_size(1536, buf, 4), "1.5");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_u64),	 cmocka_unit_test(test_i64),
		cmocka_unit_test(test_size),	 cmocka_unit_test(test_duration),
		cmocka_unit_test(test_bool),	 cmocka_unit_test(test_fmt),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
