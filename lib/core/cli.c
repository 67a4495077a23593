/* Usage errors of the tools; see cli.h. */
#include "core/cli.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

int cli_vusage_error(const char *prog, const char *cmd, const char *fmt, va_list ap)
{
	char msg[512];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	fprintf(stderr, "%s%s%s: %s\n", prog, cmd ? " " : "", cmd ? cmd : "", msg);
	if (cmd)
		fprintf(stderr, "Try '%s %s --help'.\n", prog, cmd);
	return EXIT_USAGE;
}

int cli_usage_error(const char *prog, const char *cmd, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = cli_vusage_error(prog, cmd, fmt, ap);
	va_end(ap);
	return rc;
}

int cli_bad_option(const char *prog, const char *cmd, const char *optstring, char **argv)
{
	const char *arg = argv[optind - 1];

	if (optopt) {
		const char *p = strchr(optstring, optopt);

		if (p && p[1] == ':')
			return cli_usage_error(prog, cmd, "option '%s' needs a value", arg);
		return cli_usage_error(prog, cmd, "invalid option '-%c'", optopt);
	}
	return cli_usage_error(prog, cmd, "invalid option '%s'", arg);
}
