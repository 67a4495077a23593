/* The shmcm lock under concurrency: after synchronize returns nobody is in
 * the critical region and nobody gets in until the lock is opened again.
 * Run under TSan by `make check`. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "shmcm/shmcm_lock.h"

#define READERS 3
#define ROUNDS 2000

struct shared {
	struct shmcm_lock lock;
	_Atomic int inside;
	_Atomic bool stop;
	_Atomic long entered;
	_Atomic int violations;
};

static void test_semantics(void **s)
{
	struct shmcm_lock l;

	shmcm_lock_init(&l, false);
	assert_false(shmcm_trylock(&l));
	shmcm_lock_open(&l);
	assert_true(shmcm_trylock(&l));
	assert_true(shmcm_trylock(&l));
	assert_int_equal(atomic_load(&l.count), 3);	/* count-1 holders */
	shmcm_unlock(&l);
	shmcm_unlock(&l);
	synchronize_shmcm_lock(&l);			/* nobody inside: returns */
	assert_int_equal(atomic_load(&l.count), 0);
	assert_false(shmcm_trylock(&l));
	synchronize_shmcm_lock(&l);			/* twice is harmless */
	shmcm_lock_open(&l);
	assert_true(shmcm_trylock(&l));
	shmcm_unlock(&l);
}

static void *reader(void *arg)
{
	struct shared *sh = arg;

	while (!atomic_load(&sh->stop)) {
		if (!shmcm_trylock(&sh->lock))
			continue;
		atomic_fetch_add(&sh->inside, 1);
		atomic_fetch_add(&sh->entered, 1);
		atomic_fetch_sub(&sh->inside, 1);
		shmcm_unlock(&sh->lock);
	}
	return NULL;
}

static void test_stress(void **s)
{
	struct shared sh = { 0 };
	pthread_t t[READERS];

	shmcm_lock_init(&sh.lock, true);
	for (int i = 0; i < READERS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, reader, &sh), 0);
	for (int r = 0; r < ROUNDS; r++) {
		/* close the lock only once readers are going through it */
		long seen = atomic_load(&sh.entered);
		for (int w = 0; w < 100000 && atomic_load(&sh.entered) == seen; w++)
			sched_yield();
		synchronize_shmcm_lock(&sh.lock);
		/* 1. nobody inside; 2. nobody can get in */
		if (atomic_load(&sh.inside) != 0)
			atomic_fetch_add(&sh.violations, 1);
		long before = atomic_load(&sh.entered);
		for (volatile int spin = 0; spin < 200; spin++)
			;
		if (atomic_load(&sh.entered) != before || atomic_load(&sh.inside) != 0)
			atomic_fetch_add(&sh.violations, 1);
		shmcm_lock_open(&sh.lock);
		for (volatile int spin = 0; spin < 200; spin++)
			;
	}
	atomic_store(&sh.stop, true);
	for (int i = 0; i < READERS; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(atomic_load(&sh.violations), 0);
	assert_true(atomic_load(&sh.entered) >= ROUNDS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_semantics),
		cmocka_unit_test(test_stress),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
