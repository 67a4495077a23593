/* Logging: the only part of the library that writes to stderr.
 *
 * Each line is "prog: message\n" written with one write(2), so lines from
 * different threads never interleave.  errno is preserved across every call,
 * so a caller can log and then still report errno.  The level comes from
 * XPRT_LOG=error|warn|info|debug (default warn).
 *
 * xlog() is also a macro: the level test is an inline relaxed load done before
 * any argument formatting, so disabled debug lines on a data path cost one
 * compare.  (xlog)(...) calls the function directly. */
#ifndef XPRT_CORE_LOG_H
#define XPRT_CORE_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum xlog_level { XLOG_ERROR, XLOG_WARN, XLOG_INFO, XLOG_DEBUG };

void xlog_init(const char *prog);
void xlog_set_level(enum xlog_level l);
enum xlog_level xlog_level(void);
/* cold: gcc lays the blocks that call it out of their functions' code, so
 * a hot path is not spread over pages by its logging and error handling. */
void xlog(enum xlog_level l, const char *fmt, ...) __attribute__((cold, format(printf, 2, 3)));

/* The library's other way to say what went wrong: a message into the
 * caller's err buffer (nothing when err is NULL or errlen 0). */
void xerr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((cold, format(printf, 3, 4)));

/* Current level; written only through xlog_set_level()/xlog_init(). */
extern int xlog_cur_level;

static inline bool xlog_enabled(enum xlog_level l)
{
	return (int)l <= __atomic_load_n(&xlog_cur_level, __ATOMIC_RELAXED);
}

#define xlog(l, ...) (xlog_enabled(l) ? (xlog)((l), __VA_ARGS__) : (void)0)

#define xlog_err(...)  xlog(XLOG_ERROR, __VA_ARGS__)
#define xlog_warn(...) xlog(XLOG_WARN, __VA_ARGS__)
#define xlog_info(...) xlog(XLOG_INFO, __VA_ARGS__)
#define xlog_dbg(...)  xlog(XLOG_DEBUG, __VA_ARGS__)

/* Rate limiting, per call site: at most XLOG_RL_BURST lines per one-second
 * window; the first line of the next window is preceded by a count of what
 * was dropped, so a flood is visible without drowning the terminal. */
#define XLOG_RL_BURST 10

struct xlog_rl {
	uint64_t window_ns;
	uint32_t count;
	uint32_t missed;
};

bool xlog_rl_allow(struct xlog_rl *rl, enum xlog_level l, unsigned burst);

#define xlog_ratelimited(l, ...)                                             \
	do {                                                                 \
		static struct xlog_rl xlog_rl_state_;                        \
		if (xlog_enabled(l) &&                                       \
		    xlog_rl_allow(&xlog_rl_state_, (l), XLOG_RL_BURST))      \
			(xlog)((l), __VA_ARGS__);                            \
	} while (0)

#endif
