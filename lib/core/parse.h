/* Checked number parsing (OpenBSD strtonum style) and human formatting.
 *
 * Every parser returns 0 on success, or -1 with *errstr set to a static
 * string: "invalid", "too small" or "too large".  Whitespace anywhere, an
 * empty string, a sign on an unsigned value and junk after the number are
 * "invalid"; a number that does not fit is "too large" (or "too small" for
 * negative signed values) rather than silently clamped. */
#ifndef XPRT_CORE_PARSE_H
#define XPRT_CORE_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decimal only; leading zeros do not mean octal. */
int xparse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out, const char **errstr);
/* Decimal with an optional leading '-' or '+'. */
int xparse_i64(const char *s, int64_t min, int64_t max, int64_t *out, const char **errstr);
/* Decimal or 0x hex, then an optional suffix: B, or one of kKmMgGtT (powers
 * of 1024) optionally followed by "i", "iB" or "B": 4K = 4k = 4KiB = 4kB =
 * 4096.  In hex, a trailing 'B' is a digit (0x1B is 27). */
int xparse_size(const char *s, uint64_t min, uint64_t max, uint64_t *out, const char **errstr);
/* A decimal number, optionally with a fraction ("1.5ms"), and a unit: ns, us,
 * ms, s, m (minutes), h.  A bare number is in units of bare_unit_ns; when
 * bare_unit_ns is 0 a unit is required.  Sub-nanosecond remainders are
 * truncated. */
int xparse_duration(const char *s, uint64_t bare_unit_ns, uint64_t min_ns, uint64_t max_ns,
		    uint64_t *out_ns, const char **errstr);
/* on|off|yes|no|true|false|1|0, case-insensitive. */
int xparse_bool(const char *s, bool *out, const char **errstr);

/* Formatting into the caller's buffer; each returns buf.  Output is cut at
 * len, never overflowed; 32 bytes hold every size and duration and any rate
 * below 10^21 B/s. */
const char *xfmt_size(uint64_t bytes, char *buf, size_t len);     /* "512 B", "64 KiB", "1.5 MiB" */
const char *xfmt_rate(double bytes_per_s, char *buf, size_t len); /* "512 B/s", "12.34 GB/s" */
const char *xfmt_duration(uint64_t ns, char *buf, size_t len);    /* "850 ns", "1.25 us", "2.00 s" */

#endif
