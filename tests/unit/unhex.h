/* Wire-format tests spell their expected bytes as hex. */
#ifndef XPRT_TESTS_UNHEX_H
#define XPRT_TESTS_UNHEX_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* hex string (spaces allowed) -> bytes; returns the count */
static size_t unhex(const char *s, uint8_t *out)
{
	size_t n = 0;

	while (*s) {
		if (*s == ' ') {
			s++;
			continue;
		}
		char b[3] = { s[0], s[1], 0 };

		out[n++] = (uint8_t)strtoul(b, NULL, 16);
		s += 2;
	}
	return n;
}

#endif
