/* Threads the library starts for itself (a connector, IO workers, a
 * directory walk, a mailbox's receiver) take no process signal: SIGINT or
 * SIGTERM caught there would not interrupt the caller's loop, which learns
 * of a stop by its own wait returning EINTR, and an alarm meant to cut the
 * caller's blocking write short would cut the thread's connect() instead. */
#ifndef XPRT_CORE_XTHREAD_H
#define XPRT_CORE_XTHREAD_H

#include <pthread.h>
#include <signal.h>

/* pthread_create() with every signal blocked in the new thread (the
 * caller's mask is as it was).  0 or the error number. */
static inline int xthread_create(pthread_t *t, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	int rc;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(t, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

#endif
