#include "core/uri.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/parse.h"

static const char *const scheme_names[] = {
	[XURI_AUTO] = "auto", [XURI_SHM] = "shm",   [XURI_TCP] = "tcp",
	[XURI_UDP] = "udp",   [XURI_RDMA] = "rdma", [XURI_UD] = "ud",
};

const char *xuri_scheme_name(enum xuri_scheme s)
{
	if ((unsigned)s >= sizeof(scheme_names) / sizeof(scheme_names[0]))
		return "?";
	return scheme_names[s];
}

static int uri_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int uri_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static bool name_char(char c)
{
	return isalnum((unsigned char)c) || c == '.' || c == '_' || c == '-';
}

static bool valid_shm_name(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > XURI_SHM_NAME_MAX || s[0] == '.' || s[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!name_char(s[i]))
			return false;
	return true;
}

/* Hex groups, ':' and '.' (for ::ffff:1.2.3.4), then an optional %zone.
 * The resolver does the real validation; this only keeps out characters that
 * would make the canonical form ambiguous. */
static bool valid_ipv6(const char *s, size_t n)
{
	bool colon = false;
	size_t i = 0;

	for (; i < n && s[i] != '%'; i++) {
		if (s[i] == ':')
			colon = true;
		else if (!isxdigit((unsigned char)s[i]) && s[i] != '.')
			return false;
	}
	if (i < n) {
		if (++i == n)
			return false;
		for (; i < n; i++)
			if (!name_char(s[i]))
				return false;
	}
	return colon;
}

/* "gid:" and an InfiniBand GID, which is written as an IPv6 address (the
 * kernel's rtrs "gid:" addresses), without a scope. */
static bool is_gid(const char *s, size_t n)
{
	return n >= 4 && strncasecmp(s, "gid:", 4) == 0;
}

bool xuri_is_gid(const char *host)
{
	return is_gid(host, strlen(host));
}

static bool valid_gid(const char *s, size_t n)
{
	return !memchr(s, '%', n) && valid_ipv6(s, n);
}

static int parse_hostport(const char *s, const char *rest, uint16_t default_port,
			  struct xuri *u, char *err, size_t errlen)
{
	const char *host, *port = NULL, *why;
	size_t hlen;
	uint64_t v;

	if (*rest == '[') {
		const char *close = strchr(rest, ']');

		if (!close)
			return uri_err(err, errlen, "missing ']' in '%s'", s);
		host = rest + 1;
		hlen = (size_t)(close - host);
		if (is_gid(host, hlen)) {
			if (u->scheme != XURI_RDMA)
				return uri_err(err, errlen, "a gid: address is for rdma:// only, in '%s'",
					       s);
			if (hlen >= sizeof(u->host) || !valid_gid(host + 4, hlen - 4))
				return uri_err(err, errlen, "invalid GID '[%.*s]' in '%s'", (int)hlen,
					       host, s);
		} else if (hlen >= sizeof(u->host) || !valid_ipv6(host, hlen)) {
			return uri_err(err, errlen, "invalid IPv6 address '[%.*s]' in '%s'",
				       (int)hlen, host, s);
		}
		if (close[1] == ':')
			port = close + 2;
		else if (close[1] != '\0')
			return uri_err(err, errlen, "unexpected '%s' after ']' in '%s'", close + 1, s);
	} else {
		const char *colon = strrchr(rest, ':');

		host = rest;
		hlen = colon ? (size_t)(colon - rest) : strlen(rest);
		if (colon)
			port = colon + 1;
		if (memchr(host, ':', hlen))
			return uri_err(err, errlen, "IPv6 address must be in brackets in '%s'", s);
		if (hlen == 0)
			return uri_err(err, errlen, "missing host in '%s'", s);
		for (size_t i = 0; i < hlen; i++)
			if (!name_char(host[i]))
				return uri_err(err, errlen, "invalid host '%.*s' in '%s'",
					       (int)hlen, host, s);
		if (hlen >= sizeof(u->host))
			return uri_err(err, errlen, "host name too long in '%s'", s);
	}
	memcpy(u->host, host, hlen);
	u->host[hlen] = '\0';

	if (!port || !*port) {
		if (!port && default_port) {
			u->port = default_port;
			return 0;
		}
		return uri_err(err, errlen, "missing port in '%s'", s);
	}
	if (xparse_u64(port, 0, 65535, &v, &why) < 0) {
		if (strcmp(why, "invalid") == 0)
			return uri_err(err, errlen, "invalid port '%s' in '%s'", port, s);
		return uri_err(err, errlen, "port '%s' out of range", port);
	}
	u->port = (uint16_t)v;
	return 0;
}

/* The SRC of SRC@HOST: an IPv4 literal, or an IPv6 one in brackets. */
static int parse_src(const char *s, const char *src, size_t n, struct xuri *u, char *err,
		     size_t errlen)
{
	bool v6 = n >= 2 && src[0] == '[' && src[n - 1] == ']';
	const char *a = v6 ? src + 1 : src;
	size_t an = v6 ? n - 2 : n;

	if (u->scheme != XURI_TCP && u->scheme != XURI_RDMA && u->scheme != XURI_AUTO)
		return uri_err(err, errlen, "a source address (SRC@) is for tcp:// and rdma:// "
			       "only, in '%s'", s);
	if (!an || an >= sizeof(u->src))
		return uri_err(err, errlen, "invalid source address in '%s'", s);
	if (v6 && is_gid(a, an)) {
		if (u->scheme != XURI_RDMA || !valid_gid(a + 4, an - 4))
			return uri_err(err, errlen, "invalid source GID '%.*s' in '%s' (rdma:// only)",
				       (int)n, src, s);
	} else if (v6) {
		if (!valid_ipv6(a, an))
			return uri_err(err, errlen, "invalid IPv6 source address '%.*s' in '%s'",
				       (int)n, src, s);
	} else {
		int dots = 0;

		for (size_t i = 0; i < an; i++) {
			if (a[i] == '.')
				dots++;
			else if (!isdigit((unsigned char)a[i]))
				return uri_err(err, errlen, "the source address '%.*s' in '%s' is not an "
					       "IP address (an IPv6 one goes in brackets)", (int)n, src, s);
		}
		if (dots != 3)
			return uri_err(err, errlen, "invalid source address '%.*s' in '%s'",
				       (int)n, src, s);
	}
	memcpy(u->src, a, an);
	u->src[an] = '\0';
	return 0;
}

int xuri_parse(const char *s, uint16_t default_port, struct xuri *u, char *err, size_t errlen)
{
	const char *rest, *sep;

	memset(u, 0, sizeof(*u));
	if (!s || !*s)
		return uri_err(err, errlen, "empty address");
	sep = strstr(s, "://");
	if (sep) {
		size_t n = (size_t)(sep - s);

		u->scheme = XURI_AUTO;
		for (int i = XURI_SHM; i <= XURI_UD; i++) {
			if (strlen(scheme_names[i]) == n && strncasecmp(s, scheme_names[i], n) == 0)
				u->scheme = (enum xuri_scheme)i;
		}
		if (u->scheme == XURI_AUTO)
			return uri_err(err, errlen, "unknown scheme '%.*s' in '%s'", (int)n, s, s);
		rest = sep + 3;
	} else {
		u->scheme = XURI_AUTO;
		rest = s;
	}

	if (u->scheme == XURI_SHM) {
		if (!valid_shm_name(rest))
			return uri_err(err, errlen, "invalid shm name '%s'", rest);
		strcpy(u->name, rest);
		return 0;
	}
	sep = strchr(rest, '@');
	if (sep) {
		int rc = parse_src(s, rest, (size_t)(sep - rest), u, err, errlen);

		if (rc)
			return rc;
		rest = sep + 1;
	}
	int rc = parse_hostport(s, rest, default_port, u, err, errlen);

	if (rc == 0 && u->src[0] && xuri_is_gid(u->src) != xuri_is_gid(u->host))
		return uri_err(err, errlen, "a GID and an IP address in one path, in '%s'", s);
	return rc;
}

int xuri_format(const struct xuri *u, char *buf, size_t len)
{
	const char *scheme = "", *sep = "";
	int n;

	if ((unsigned)u->scheme > XURI_UD)
		return -EINVAL;
	if (u->scheme == XURI_SHM) {
		n = snprintf(buf, len, "shm://%s", u->name);
	} else {
		if (u->scheme != XURI_AUTO) {
			scheme = scheme_names[u->scheme];
			sep = "://";
		}
		char src[80] = "";

		if (u->src[0])
			snprintf(src, sizeof(src), strchr(u->src, ':') ? "[%s]@" : "%s@", u->src);
		if (strchr(u->host, ':'))
			n = snprintf(buf, len, "%s%s%s[%s]:%u", scheme, sep, src, u->host, u->port);
		else
			n = snprintf(buf, len, "%s%s%s%s:%u", scheme, sep, src, u->host, u->port);
	}
	if (n < 0)
		return -EINVAL;
	return (size_t)n >= len ? -ENOSPC : 0;
}
