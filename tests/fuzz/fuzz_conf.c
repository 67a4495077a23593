/* xconf_parse on arbitrary bytes, then every output format of whatever it
 * accepted: the emitters must handle any tree the parser can build. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conf.h"
#include "core/emit.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	static FILE *devnull;
	char err[256];
	struct xnode *root;

	if (!devnull && !(devnull = fopen("/dev/null", "w")))
		abort();
	root = xconf_parse((const char *)d, n, err, sizeof(err));
	if (!root) {
		if (!memchr(err, '\0', sizeof(err)) || err[0] == '\0')
			abort();
		return 0;
	}
	/* The parser only hands out valid UTF-8, so YAML must not fail. */
	if (xemit(devnull, root, XFMT_TEXT) != 0 || xemit(devnull, root, XFMT_YAML) != 0 ||
	    xemit(devnull, root, XFMT_JSON) != 0)
		abort();
	xnode_free(root);
	return 0;
}
