/* The shmcm lock (seed 000, "Some words about synchronization and the
 * so-called shmcm locks"), with exactly the seed's semantics: a count that
 * starts at 1 when open; trylock succeeds only while it is positive and
 * adds one; unlock subtracts one and wakes the synchronizer once the count
 * has gone negative; synchronize swaps in 0, so no new holder gets in, and
 * sleeps until the k holders it found have left (count == -k).  Holding is
 * cheap (one atomic each way, no syscall); only synchronize may sleep.
 * The seed's wait queue is a futex on the count word.  Process-local.
 */
#ifndef XPRT_SHMCM_LOCK_H
#define XPRT_SHMCM_LOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct shmcm_lock {
	_Atomic int32_t count;
};

/* open: trylock succeeds; closed: it fails until shmcm_lock_open(). */
static inline void shmcm_lock_init(struct shmcm_lock *l, bool open)
{
	atomic_init(&l->count, open ? 1 : 0);
}

/* atomic_positive_inc() */
static inline bool shmcm_trylock(struct shmcm_lock *l)
{
	int32_t c = atomic_load_explicit(&l->count, memory_order_relaxed);

	while (c > 0)
		if (atomic_compare_exchange_weak_explicit(&l->count, &c, c + 1,
							  memory_order_acquire,
							  memory_order_relaxed))
			return true;
	return false;
}

void shmcm_lock_wake(struct shmcm_lock *l);

/* atomic_add_negative(-1, count) -> wake_up */
static inline void shmcm_unlock(struct shmcm_lock *l)
{
	if (atomic_fetch_sub_explicit(&l->count, 1, memory_order_release) - 1 < 0)
		shmcm_lock_wake(l);
}

/* Closes the lock and waits until nobody is inside.  May sleep. */
void synchronize_shmcm_lock(struct shmcm_lock *l);

/* Re-opens a synchronized lock (LINX: shmcm_enable_*). */
static inline void shmcm_lock_open(struct shmcm_lock *l)
{
	atomic_store_explicit(&l->count, 1, memory_order_release);
}

#endif
