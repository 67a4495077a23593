#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"

/* Captures stderr into a pipe for the duration of a test. */
static int saved_stderr = -1, rd = -1;

static int capture_start(void **state)
{
	int p[2];

	(void)state;
	if (pipe2(p, O_NONBLOCK) < 0)
		return -1;
	saved_stderr = dup(STDERR_FILENO);
	dup2(p[1], STDERR_FILENO);
	close(p[1]);
	rd = p[0];
	return 0;
}

static int capture_stop(void **state)
{
	(void)state;
	dup2(saved_stderr, STDERR_FILENO);
	close(saved_stderr);
	close(rd);
	return 0;
}

static const char *captured(void)
{
	static char buf[65536];
	ssize_t n = read(rd, buf, sizeof(buf) - 1);

	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

static int side_effects;

static int count_call(void)
{
	return ++side_effects;
}

static void test_levels(void **state)
{
	(void)state;
	setenv("XPRT_LOG", "info", 1);
	xlog_init("/usr/bin/tool");
	assert_int_equal(xlog_level(), XLOG_INFO);

	xlog_err("bad %d", 1);
	xlog_warn("warned");
	xlog_info("info line\n"); /* no doubled newline */
	xlog_dbg("hidden %d", count_call());
	assert_string_equal(captured(), "tool: bad 1\ntool: warned\ntool: info line\n");
	/* Disabled levels do not even evaluate their arguments. */
	assert_int_equal(side_effects, 0);

	xlog_set_level(XLOG_DEBUG);
	xlog_dbg("shown %d", count_call());
	assert_string_equal(captured(), "tool: shown 1\n");
	/* a name a peer sent cannot forge a line: controls become '?' */
	xlog_info("session '%s' up", "x\ntool: session FAKE\r\x1b[2J\x7f\tok");
	assert_string_equal(captured(), "tool: session 'x?tool: session FAKE??[2J?\tok' up\n");
	xlog_set_level(XLOG_ERROR);
	xlog_warn("nope");
	assert_string_equal(captured(), "");

	setenv("XPRT_LOG", "loud", 1);
	xlog_init("tool");
	assert_int_equal(xlog_level(), XLOG_WARN);
	setenv("XPRT_LOG", "DEBUG", 1);
	xlog_init("tool");
	assert_int_equal(xlog_level(), XLOG_DEBUG);
	unsetenv("XPRT_LOG");
	xlog_init("tool");
	assert_int_equal(xlog_level(), XLOG_WARN);
}

static void test_errno_and_long(void **state)
{
	char big[5000];
	const char *out;

	(void)state;
	xlog_init("t");
	errno = ENOSPC;
	xlog_err("x");
	assert_int_equal(errno, ENOSPC);
	errno = EIO;
	xlog_dbg("filtered");
	assert_int_equal(errno, EIO);
	captured();

	/* Over-long lines are cut, marked, and still one line. */
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	xlog_err("%s", big);
	out = captured();
	assert_int_equal(strlen(out), 2047);
	assert_memory_equal(out, "t: aaa", 6);
	assert_string_equal(out + 2042, "a...\n");
}

/* One call site: the limit is per site. */
static void flood(const char *what, int i)
{
	xlog_ratelimited(XLOG_ERROR, "%s %d", what, i);
}

static void test_ratelimit(void **state)
{
	const char *out;
	int lines = 0;

	(void)state;
	xlog_init("t");
	for (int i = 0; i < 50; i++)
		flood("flood", i);
	out = captured();
	for (const char *p = out; (p = strchr(p, '\n')); p++)
		lines++;
	assert_int_equal(lines, XLOG_RL_BURST);
	assert_memory_equal(out, "t: flood 0\n", 11);

	/* Next window: the drop count comes first. */
	usleep(1100 * 1000);
	flood("after", 0);
	assert_string_equal(captured(), "t: 40 similar messages suppressed\nt: after 0\n");
	/* Another call site has its own budget. */
	xlog_ratelimited(XLOG_ERROR, "elsewhere");
	assert_string_equal(captured(), "t: elsewhere\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_levels),
		cmocka_unit_test(test_errno_and_long),
		cmocka_unit_test(test_ratelimit),
	};

	return cmocka_run_group_tests(tests, capture_start, capture_stop);
}
