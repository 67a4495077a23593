#include "core/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/xtime.h"

int xlog_cur_level = XLOG_WARN;

/* Set once at startup, before threads; read-only afterwards. */
static char log_prog[64];

/* Rate-limit state is per call site but shared by all threads hitting it. */
static pthread_mutex_t rl_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[] = {
	[XLOG_ERROR] = "error",
	[XLOG_WARN] = "warn",
	[XLOG_INFO] = "info",
	[XLOG_DEBUG] = "debug",
};

void xlog_init(const char *prog)
{
	int saved = errno;
	const char *env = getenv("XPRT_LOG");
	int lvl = XLOG_WARN;

	if (prog) {
		const char *slash = strrchr(prog, '/');

		snprintf(log_prog, sizeof(log_prog), "%s", slash ? slash + 1 : prog);
	}
	if (env) {
		for (int i = XLOG_ERROR; i <= XLOG_DEBUG; i++)
			if (strcasecmp(env, level_names[i]) == 0)
				lvl = i;
	}
	__atomic_store_n(&xlog_cur_level, lvl, __ATOMIC_RELAXED);
	errno = saved;
}

void xlog_set_level(enum xlog_level l)
{
	int v = (int)l;

	if (v < XLOG_ERROR)
		v = XLOG_ERROR;
	if (v > XLOG_DEBUG)
		v = XLOG_DEBUG;
	__atomic_store_n(&xlog_cur_level, v, __ATOMIC_RELAXED);
}

enum xlog_level xlog_level(void)
{
	return (enum xlog_level)__atomic_load_n(&xlog_cur_level, __ATOMIC_RELAXED);
}

static void write_all(const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(STDERR_FILENO, buf, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		buf += n;
		len -= (size_t)n;
	}
}

static void vlog(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

static void vlog(const char *fmt, va_list ap)
{
	/* Lines up to PIPE_BUF (4096) reach a pipe atomically; keep below. */
	char buf[2048];
	const char *prog = log_prog[0] ? log_prog : program_invocation_short_name;
	int off = 0, n;

	if (prog && prog[0])
		off = snprintf(buf, sizeof(buf), "%s: ", prog);
	if (off < 0 || (size_t)off >= sizeof(buf))
		off = 0;
	n = vsnprintf(buf + off, sizeof(buf) - (size_t)off, fmt, ap);
	if (n < 0)
		n = 0;
	if ((size_t)off + (size_t)n >= sizeof(buf) - 1) {
		/* Truncated: mark it and leave room for the newline. */
		off = (int)sizeof(buf) - 5;
		memcpy(buf + off, "...", 3);
		off += 3;
	} else {
		off += n;
	}
	if (off > 0 && buf[off - 1] == '\n')
		off--;
	/* one line whatever a peer put in a name it sent (a session name
	 * with a newline would forge a line of its own): controls shown as ? */
	for (int i = 0; i < off; i++)
		if (((unsigned char)buf[i] < 0x20 && buf[i] != '\t') || buf[i] == 0x7f)
			buf[i] = '?';
	buf[off++] = '\n';
	write_all(buf, (size_t)off);
}

void (xlog)(enum xlog_level l, const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	if (!xlog_enabled(l))
		return;
	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
	errno = saved;
}

bool xlog_rl_allow(struct xlog_rl *rl, enum xlog_level l, unsigned burst)
{
	int saved = errno;
	uint64_t now = xtime_ns();
	uint32_t missed = 0;
	bool ok;

	pthread_mutex_lock(&rl_lock);
	if (rl->window_ns == 0 || now - rl->window_ns >= XTIME_NS_PER_S) {
		missed = rl->missed;
		rl->window_ns = now;
		rl->count = 0;
		rl->missed = 0;
	}
	ok = rl->count < burst;
	if (ok)
		rl->count++;
	else if (rl->missed < UINT32_MAX)
		rl->missed++;
	pthread_mutex_unlock(&rl_lock);

	if (missed)
		(xlog)(l, "%u similar messages suppressed", missed);
	errno = saved;
	return ok;
}

void xerr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}
