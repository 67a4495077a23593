/* What every tool's argument parsing shares: the exit status and the one-line
 * usage errors (STYLE.md 4).  For cmd/<tool>/ only: unlike the rest of the
 * library these print, to stderr, since reporting a usage error to the user
 * is all they are for. */
#ifndef XPRT_CORE_CLI_H
#define XPRT_CORE_CLI_H

#include <stdarg.h>

/* Exit status of every xprt tool. */
enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

/* Prints "PROG CMD: msg" (or "PROG: msg" when cmd is NULL) and, with a
 * command, "Try 'PROG CMD --help'." to stderr; returns EXIT_USAGE. */
int cli_usage_error(const char *prog, const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int cli_vusage_error(const char *prog, const char *cmd, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));

/* getopt's '?' (run with opterr = 0): one line naming the unknown option or
 * the one missing its value; returns EXIT_USAGE. */
int cli_bad_option(const char *prog, const char *cmd, const char *optstring, char **argv);

#endif
