/* Thin futex(2) wrappers.  `shared` selects a futex that works across
 * processes mapping the same memory (no FUTEX_PRIVATE_FLAG). */
#ifndef XPRT_FUTEX_H
#define XPRT_FUTEX_H

#include <errno.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Sleeps while *addr == val, at most `timeout_ns` (0 = forever).
 * Returns 0 when woken or the value differed, -ETIMEDOUT, or -EINTR. */
static inline int xfutex_wait(_Atomic uint32_t *addr, uint32_t val,
			      uint64_t timeout_ns, bool shared)
{
	struct timespec ts, *tp = NULL;
	int op = FUTEX_WAIT | (shared ? 0 : FUTEX_PRIVATE_FLAG);

	if (timeout_ns) {
		ts.tv_sec = (time_t)(timeout_ns / 1000000000u);
		ts.tv_nsec = (long)(timeout_ns % 1000000000u);
		tp = &ts;
	}
	if (syscall(SYS_futex, addr, op, val, tp, NULL, 0) == 0)
		return 0;
	if (errno == EAGAIN)
		return 0;
	return -errno;
}

static inline void xfutex_wake(_Atomic uint32_t *addr, int n, bool shared)
{
	int op = FUTEX_WAKE | (shared ? 0 : FUTEX_PRIVATE_FLAG);

	syscall(SYS_futex, addr, op, n, NULL, NULL, 0);
}

#endif
