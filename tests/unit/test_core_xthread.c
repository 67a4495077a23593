/* xthread_create (lib/core/xthread.h): the library's own threads take no
 * process signal, and the caller's mask is left as it was. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/xthread.h"

static void *mask_of_thread(void *arg)
{
	pthread_sigmask(SIG_SETMASK, NULL, (sigset_t *)arg);
	return NULL;
}

static void thread_blocks_every_signal(void **state)
{
	sigset_t in, before, after;
	pthread_t t;

	(void)state;
	pthread_sigmask(SIG_SETMASK, NULL, &before);
	assert_int_equal(xthread_create(&t, mask_of_thread, &in), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_true(sigismember(&in, SIGINT));
	assert_true(sigismember(&in, SIGTERM));
	assert_true(sigismember(&in, SIGHUP));
	assert_true(sigismember(&in, SIGALRM));
	assert_true(sigismember(&in, SIGPIPE));
	pthread_sigmask(SIG_SETMASK, NULL, &after);
	for (int s = 1; s < 32; s++)
		assert_int_equal(sigismember(&before, s), sigismember(&after, s));
	assert_false(sigismember(&after, SIGTERM));
}

int main(void)
{
	const struct CMUnitTest t[] = {
		cmocka_unit_test(thread_blocks_every_signal),
	};

	return cmocka_run_group_tests(t, NULL, NULL);
}
