/* The version every tool prints with --version: git describe of the
 * checkout it was built from, or the VERSION file of a release (the
 * Makefile passes it in). */
#include "core/cli.h"

#include <stdio.h>

#ifndef XPRT_VERSION
#define XPRT_VERSION "unknown"
#endif

const char xprt_version[] = XPRT_VERSION;

int cli_version(const char *prog, const char *protocols)
{
	if (protocols)
		printf("%s %s (%s)\n", prog, xprt_version, protocols);
	else
		printf("%s %s\n", prog, xprt_version);
	return fflush(stdout) ? EXIT_FAIL : EXIT_OK;
}
