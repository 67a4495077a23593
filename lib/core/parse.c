#include "core/parse.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

enum { SCAN_OK, SCAN_NONE, SCAN_OVERFLOW };

static int digit_val(char c, unsigned base)
{
	int v;

	if (c >= '0' && c <= '9')
		v = c - '0';
	else if (c >= 'a' && c <= 'f')
		v = c - 'a' + 10;
	else if (c >= 'A' && c <= 'F')
		v = c - 'A' + 10;
	else
		return -1;
	return v < (int)base ? v : -1;
}

/* Consumes every digit even past an overflow, so that "999...9x" is reported
 * as junk ("invalid") before the overflow, as strtonum does. */
static int scan_digits(const char **sp, unsigned base, uint64_t *out)
{
	const char *p = *sp;
	uint64_t v = 0;
	bool over = false;
	int d;

	while ((d = digit_val(*p, base)) >= 0) {
		if (v > (UINT64_MAX - (uint64_t)d) / base)
			over = true;
		else
			v = v * base + (uint64_t)d;
		p++;
	}
	if (p == *sp)
		return SCAN_NONE;
	*sp = p;
	*out = v;
	return over ? SCAN_OVERFLOW : SCAN_OK;
}

static int fail(const char **errstr, const char *why)
{
	if (errstr)
		*errstr = why;
	return -1;
}

static int range_u64(uint64_t v, uint64_t min, uint64_t max, uint64_t *out, const char **errstr)
{
	if (v < min)
		return fail(errstr, "too small");
	if (v > max)
		return fail(errstr, "too large");
	*out = v;
	if (errstr)
		*errstr = NULL;
	return 0;
}

int xparse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out, const char **errstr)
{
	uint64_t v;
	int r;

	if (!s)
		return fail(errstr, "invalid");
	r = scan_digits(&s, 10, &v);
	if (r == SCAN_NONE || *s)
		return fail(errstr, "invalid");
	if (r == SCAN_OVERFLOW)
		return fail(errstr, "too large");
	return range_u64(v, min, max, out, errstr);
}

int xparse_i64(const char *s, int64_t min, int64_t max, int64_t *out, const char **errstr)
{
	bool neg = false;
	uint64_t mag;
	int64_t v;
	int r;

	if (!s)
		return fail(errstr, "invalid");
	if (*s == '-' || *s == '+')
		neg = *s++ == '-';
	r = scan_digits(&s, 10, &mag);
	if (r == SCAN_NONE || *s)
		return fail(errstr, "invalid");
	if (neg) {
		if (r == SCAN_OVERFLOW || mag > (uint64_t)INT64_MAX + 1)
			return fail(errstr, "too small");
		/* -(2^63) has no positive counterpart; go through unsigned. */
		v = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
	} else {
		if (r == SCAN_OVERFLOW || mag > (uint64_t)INT64_MAX)
			return fail(errstr, "too large");
		v = (int64_t)mag;
	}
	if (v < min)
		return fail(errstr, "too small");
	if (v > max)
		return fail(errstr, "too large");
	*out = v;
	if (errstr)
		*errstr = NULL;
	return 0;
}

int xparse_size(const char *s, uint64_t min, uint64_t max, uint64_t *out, const char **errstr)
{
	unsigned base = 10, shift = 0;
	uint64_t v;
	int r;

	if (!s)
		return fail(errstr, "invalid");
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		base = 16;
		s += 2;
	}
	r = scan_digits(&s, base, &v);
	if (r == SCAN_NONE)
		return fail(errstr, "invalid");
	if (*s && strchr("kKmMgGtT", *s)) {
		const char *units = "kmgt";

		shift = 10 * (unsigned)(strchr(units, *s | 0x20) - units + 1);
		s++;
		if (*s == 'i')
			s++;
		if (*s == 'B')
			s++;
	} else if (*s == 'B') {
		s++;
	}
	if (*s)
		return fail(errstr, "invalid");
	if (r == SCAN_OVERFLOW || (shift && v > (UINT64_MAX >> shift)))
		return fail(errstr, "too large");
	return range_u64(v << shift, min, max, out, errstr);
}

static const struct {
	const char *sfx;
	uint64_t ns;
} dur_units[] = {
	{ "ns", 1 },
	{ "us", 1000ull },
	{ "ms", 1000000ull },
	{ "s", 1000000000ull },
	{ "m", 60000000000ull },
	{ "h", 3600000000000ull },
};

int xparse_duration(const char *s, uint64_t bare_unit_ns, uint64_t min_ns, uint64_t max_ns,
		    uint64_t *out_ns, const char **errstr)
{
	uint64_t ip, frac = 0, scale = 1, unit = 0;
	unsigned __int128 total;
	bool over;
	int r;

	if (!s)
		return fail(errstr, "invalid");
	r = scan_digits(&s, 10, &ip);
	if (r == SCAN_NONE)
		return fail(errstr, "invalid");
	over = r == SCAN_OVERFLOW;
	if (*s == '.') {
		const char *start = ++s;

		/* 18 fraction digits keep frac and scale below 10^18; anything
		 * further is far below a nanosecond for every unit we accept. */
		for (; *s >= '0' && *s <= '9'; s++) {
			if (s - start < 18) {
				frac = frac * 10 + (uint64_t)(*s - '0');
				scale *= 10;
			}
		}
		if (s == start)
			return fail(errstr, "invalid");
	}
	if (*s == '\0') {
		unit = bare_unit_ns;
	} else {
		for (size_t i = 0; i < sizeof(dur_units) / sizeof(dur_units[0]); i++)
			if (strcmp(s, dur_units[i].sfx) == 0)
				unit = dur_units[i].ns;
	}
	if (unit == 0)
		return fail(errstr, "invalid");
	if (over)
		return fail(errstr, "too large");
	total = (unsigned __int128)ip * unit + (unsigned __int128)frac * unit / scale;
	if (total > UINT64_MAX)
		return fail(errstr, "too large");
	return range_u64((uint64_t)total, min_ns, max_ns, out_ns, errstr);
}

int xparse_bool(const char *s, bool *out, const char **errstr)
{
	static const char *const yes[] = { "on", "yes", "true", "1" };
	static const char *const no[] = { "off", "no", "false", "0" };

	if (!s)
		return fail(errstr, "invalid");
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strcasecmp(s, yes[i]) == 0 || strcasecmp(s, no[i]) == 0) {
			*out = strcasecmp(s, yes[i]) == 0;
			if (errstr)
				*errstr = NULL;
			return 0;
		}
	}
	return fail(errstr, "invalid");
}

/* "1.50" -> "1.5", "2.00" -> "2": IEC sizes read better without noise. */
static void trim_zeros(char *num)
{
	char *dot = strchr(num, '.');
	char *end;

	if (!dot)
		return;
	end = num + strlen(num);
	while (end > dot + 1 && end[-1] == '0')
		end--;
	if (end == dot + 1)
		end = dot;
	*end = '\0';
}

const char *xfmt_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	uint64_t div = 1;
	unsigned u = 0;
	char num[32];
	double v;

	while (u < 6 && bytes >= div * 1024) {
		div *= 1024;
		u++;
	}
	if (bytes % div == 0) {
		snprintf(buf, len, "%" PRIu64 " %s", bytes / div, units[u]);
		return buf;
	}
	v = (double)bytes / (double)div;
	/* Would print as "1024" of this unit: show it as 1 of the next. */
	if (v >= 1023.995 && u < 6) {
		v /= 1024;
		u++;
	}
	snprintf(num, sizeof(num), "%.2f", v);
	trim_zeros(num);
	snprintf(buf, len, "%s %s", num, units[u]);
	return buf;
}

const char *xfmt_rate(double bps, char *buf, size_t len)
{
	static const char *const units[] = { "B/s", "kB/s", "MB/s", "GB/s", "TB/s", "PB/s", "EB/s" };
	unsigned u = 0;

	if (!isfinite(bps) || bps < 0) {
		snprintf(buf, len, "- B/s");
		return buf;
	}
	/* Promote before rounding could print "1000" of a unit. */
	if (bps >= 999.5) {
		u = 1;
		bps /= 1000;
		while (u < 6 && bps >= 999.995) {
			bps /= 1000;
			u++;
		}
	}
	if (u == 0)
		snprintf(buf, len, "%.0f %s", bps, units[u]);
	else
		snprintf(buf, len, "%.2f %s", bps, units[u]);
	return buf;
}

const char *xfmt_duration(uint64_t ns, char *buf, size_t len)
{
	static const char *const units[] = { "ns", "us", "ms", "s" };
	double v = (double)ns;
	unsigned u = 0;

	if (ns < 1000) {
		snprintf(buf, len, "%" PRIu64 " ns", ns);
		return buf;
	}
	while (u < 3 && v >= (u == 0 ? 1000 : 999.995)) {
		v /= 1000;
		u++;
	}
	snprintf(buf, len, "%.2f %s", v, units[u]);
	return buf;
}
