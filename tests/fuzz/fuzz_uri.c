/* xuri_parse on arbitrary bytes, with and without a default port; whatever
 * parses must format to a canonical string that parses back to the same
 * address. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/uri.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

static void check(const char *s, uint16_t dport)
{
	char err[256], canon[512];
	struct xuri a, b;

	if (xuri_parse(s, dport, &a, err, sizeof(err)) != 0) {
		if (!memchr(err, '\0', sizeof(err)) || err[0] == '\0')
			abort();
		return;
	}
	if (xuri_format(&a, canon, sizeof(canon)) != 0)
		abort();
	if (xuri_parse(canon, 0, &b, err, sizeof(err)) != 0)
		abort();
	if (a.scheme != b.scheme || a.port != b.port || strcmp(a.host, b.host) != 0 ||
	    strcmp(a.name, b.name) != 0 || strcmp(a.src, b.src) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	char *s = malloc(n + 1);

	if (!s)
		return 0;
	memcpy(s, d, n);
	s[n] = '\0';
	check(s, 0);
	check(s, 7000);
	free(s);
	return 0;
}
