/* Usage errors of the tools; see cli.h. */
#include "core/cli.h"
#include "core/emit.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

void cli_std_fds(void)
{
	for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; fd++) {
		int n;

		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		/* the lowest free number: fd itself */
		n = open("/dev/null", (fd == STDIN_FILENO ? O_WRONLY : O_RDONLY) | O_NOCTTY);
		if (n > fd) {
			dup2(n, fd);
			close(n);
		}
	}
}

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

	/* A known long option (getopt_long sets optopt to its value, which
	 * need not be in optstring): either its value is missing or it was
	 * given one it does not take. */
	if (optopt && arg[0] == '-' && arg[1] == '-') {
		const char *eq = strchr(arg, '=');

		if (eq)
			return cli_usage_error(prog, cmd, "option '%.*s' takes no value",
					       (int)(eq - arg), arg);
		return cli_usage_error(prog, cmd, "option '%s' needs a value", arg);
	}
	if (optopt) {
		const char *p = strchr(optstring, optopt);

		if (p && p[1] == ':')
			return cli_usage_error(prog, cmd, "option '%s' needs a value", arg);
		return cli_usage_error(prog, cmd, "invalid option '-%c'", optopt);
	}
	return cli_usage_error(prog, cmd, "invalid option '%s'", arg);
}

void cli_usage(const struct cli_tool *t, FILE *f, const char *name)
{
	fprintf(f, "usage: %s COMMAND [ARGS]\n\n", t->prog);
	for (size_t i = 0; i < t->ncmds; i++) {
		if (name && strcmp(name, t->cmds[i].name) != 0)
			continue;
		fprintf(f, "  %s %-*s %s\n  %*s %s\n", t->prog, t->name_width, t->cmds[i].name,
			t->cmds[i].args, t->help_indent, "", t->cmds[i].help);
	}
	if (!name && t->footer)
		fputs(t->footer, f);
}

bool cli_first_stop(bool *stopping)
{
	if (!cli_stop_requested || *stopping)
		return false;
	*stopping = true;
	cli_stop_requested = 0;
	return true;
}

static int stdout_errno;	/* the first error writing standard output */

/* Flushes standard output: true when all of it went, else false with
 * stdout_errno set -- errno is the flush's only when the flush failed;
 * an earlier write that failed may have been an xemit()'s. */
static bool stdout_flush(void)
{
	int flushed = fflush(stdout);

	if (flushed == 0 && !ferror(stdout))
		return true;
	if (!stdout_errno)
		stdout_errno = flushed ? errno : xemit_errno ? xemit_errno : EIO;
	return false;
}

int cli_stdout_error(void)
{
	return stdout_flush() ? 0 : stdout_errno;
}

bool cli_out(void)
{
	if (stdout_flush())
		return true;
	cli_stop_requested = 1;
	return false;
}

/* What the command wrote to standard output all went, or the exit
 * status says it did not: 128 + SIGPIPE for a reader that went (as a
 * filter killed by SIGPIPE), else a line and 1.  A command that failed
 * said why already. */
static int stdout_done(const char *prog, int rc)
{
	if (stdout_flush() || rc != EXIT_OK)
		return rc;
	if (stdout_errno == EPIPE)
		return 128 + SIGPIPE;
	fprintf(stderr, "%s: standard output: %s\n", prog, strerror(stdout_errno));
	return EXIT_FAIL;
}

int cli_main(const struct cli_tool *t, int argc, char **argv)
{
	opterr = 0;	/* one line of our own instead of getopt's */
	cli_std_fds();
	if (argc < 2) {
		cli_usage(t, stderr, NULL);
		return EXIT_USAGE;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		cli_usage(t, stdout, NULL);
		return stdout_done(t->prog, EXIT_OK);
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V") || !strcmp(argv[1], "version"))
		return stdout_done(t->prog, cli_version(t->prog, t->protocols));
	for (size_t i = 0; i < t->ncmds; i++)
		if (strcmp(argv[1], t->cmds[i].name) == 0)
			return stdout_done(t->prog, t->cmds[i].fn(argc - 1, argv + 1));
	fprintf(stderr, "%s: unknown command '%s'\n", t->prog, argv[1]);
	cli_usage(t, stderr, NULL);
	return EXIT_USAGE;
}

int cli_fail(const char *prog, const char *cmd, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (cmd)
		fprintf(stderr, "%s %s: %s\n", prog, cmd, msg);
	else
		fprintf(stderr, "%s: %s\n", prog, msg);
	return EXIT_FAIL;
}

int cli_parse_fmt(const char *prog, const char *cmd, const char *arg, enum xfmt *f)
{
	if (xfmt_parse(arg, f) < 0)
		return cli_usage_error(prog, cmd, "-o: '%s' is not text, yaml or json", arg);
	return EXIT_OK;
}

volatile sig_atomic_t cli_stop_requested;

static void on_stop(int sig)
{
	(void)sig;
	cli_stop_requested = 1;
}

void cli_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

void cli_stop_signals(sigset_t *set)
{
	struct sigaction old;

	sigemptyset(set);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGTERM);
	/* A hangup (the terminal closed, the ssh session dropped) would
	 * kill us by default and skip the cleanup; but nohup(1) and some
	 * supervisors start us with it ignored so that we outlive the
	 * terminal, and a disposition of SIG_IGN inherited across execve(2)
	 * is theirs to keep (POSIX nohup). */
	if (sigaction(SIGHUP, NULL, &old) < 0 || old.sa_handler != SIG_IGN)
		sigaddset(set, SIGHUP);
}

void cli_stop_handlers(void)
{
	struct sigaction sa;
	sigset_t stop;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigemptyset(&sa.sa_mask);
	cli_stop_signals(&stop);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (sigismember(&stop, SIGHUP) == 1)
		sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}
