/* What every tool's argument parsing shares: the exit status and the one-line
 * usage errors.  For cmd/<tool>/ only: unlike the rest of the
 * library these print, to stderr, since reporting a usage error to the user
 * is all they are for. */
#ifndef XPRT_CORE_CLI_H
#define XPRT_CORE_CLI_H

#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include "core/emit.h"

/* Exit status of every xprt tool. */
enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

/* Prints "PROG CMD: msg" (or "PROG: msg" when cmd is NULL) and, with a
 * command, "Try 'PROG CMD --help'." to stderr; returns EXIT_USAGE. */
int cli_usage_error(const char *prog, const char *cmd, const char *fmt, ...)
	__attribute__((cold, format(printf, 3, 4)));
int cli_vusage_error(const char *prog, const char *cmd, const char *fmt, va_list ap)
	__attribute__((cold, format(printf, 3, 0)));

/* A runtime failure: "PROG CMD: msg" (or "PROG: msg") on stderr, one
 * line; returns EXIT_FAIL. */
int cli_fail(const char *prog, const char *cmd, const char *fmt, ...)
	__attribute__((cold, format(printf, 3, 4)));

/* getopt's '?' (run with opterr = 0): one line naming the unknown option or
 * the one missing its value; returns EXIT_USAGE. */
int cli_bad_option(const char *prog, const char *cmd, const char *optstring, char **argv);

/* "-o ARG": text, yaml or json; else the usage error naming ARG. */
int cli_parse_fmt(const char *prog, const char *cmd, const char *arg, enum xfmt *f);

/* The signals that stop a tool cleanly: SIGINT, SIGTERM and SIGHUP --
 * but not SIGHUP when it is ignored already (started by nohup(1) or a
 * supervisor that means the tool to outlive its terminal).  For a tool
 * that takes them through a signalfd instead of cli_stop_handlers(). */
void cli_stop_signals(sigset_t *set);

/* The signals of cli_stop_signals() set cli_stop_requested (no
 * SA_RESTART: a sleeping poll, epoll_wait or nanosleep returns EINTR, and
 * the loop sees it); SIGPIPE is ignored (a closed pipe is a write error,
 * said once).  Called again, it keeps SIGHUP as the first call left it. */
extern volatile sig_atomic_t cli_stop_requested;
void cli_stop_handlers(void);
/* A run that winds down at a first stop signal (what is in flight still
 * lands, and counts) and ends at a second: true once, for the first, which
 * it takes (cli_stop_requested back to 0, *stopping set); a second one
 * then shows in cli_stop_requested again. */
bool cli_first_stop(bool *stopping);

/* Flushes standard output after a line a long run prints as it goes (a
 * ping's reply): false when it cannot be written -- the reader went
 * (EPIPE) or the disk is full -- and then cli_stop_requested is set, so
 * that the run ends as at a stop signal, and cli_main() ends the command
 * as a closed pipe ends a filter (exit 141) or, for another error, with
 * one line and exit 1.  So does any output of a command that exits 0 and
 * could not all be written. */
bool cli_out(void);

/* Flushes standard output: 0 when everything written to it went, else
 * the first error it met (EIO when the write that failed left none) --
 * not errno, which an earlier failed write leaves to later calls.  For a
 * line that must be read (a server's "listening"), where cli_out()'s
 * stop does not fit. */
int cli_stdout_error(void);

/* A standard stream that is closed (prog <&-, >&-) gets /dev/null opened
 * the wrong way round in its place: using it fails with EBADF, told as any
 * failure of that stream, and what the tool opens next (a socket, an
 * epoll, a signalfd) does not take its number, to be read as input or
 * written with output.  cli_main() does it first. */
void cli_std_fds(void);

/* Raises the soft limit on open files to the hard one, as servers that
 * hold many connections do (each RTRS connection takes several
 * descriptors); best effort. */
void cli_raise_nofile(void);

/* Table-driven subcommands: a name, its function, its usage and help. */
struct cmd {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *args;
	const char *help;
};

struct cli_tool {
	const char *prog;
	const struct cmd *cmds;
	size_t ncmds;
	int name_width;		/* command name column */
	int help_indent;	/* where a command's help line starts */
	const char *footer;	/* after the list in the full usage */
	const char *protocols;	/* what --version names besides the version */
};

/* xprt's version (version.c) and "PROG VERSION (PROTOCOLS)" on stdout, the
 * answer to --version and -V; EXIT_OK. */
extern const char xprt_version[];
int cli_version(const char *prog, const char *protocols);

/* The usage of every command, or of `name` only, to f. */
void cli_usage(const struct cli_tool *t, FILE *f, const char *name);
/* main() of a tool: no command or an unknown one is a usage error (2),
 * -h/--help/help prints the usage, a command runs with argv[0] = its name.
 * Sets opterr = 0: the tools print getopt errors as one line of their own. */
int cli_main(const struct cli_tool *t, int argc, char **argv);

#endif
