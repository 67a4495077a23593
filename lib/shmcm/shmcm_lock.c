#include "shmcm/shmcm_lock.h"
#include "xprt/futex.h"

#include <limits.h>

void shmcm_lock_wake(struct shmcm_lock *l)
{
	xfutex_wake((_Atomic uint32_t *)&l->count, INT_MAX, false);
}

void synchronize_shmcm_lock(struct shmcm_lock *l)
{
	int32_t k = atomic_exchange_explicit(&l->count, 0, memory_order_acq_rel) - 1;
	int32_t c;

	if (k <= 0)
		return;
	/* Each holder's unlock subtracts one and wakes us while negative. */
	while ((c = atomic_load_explicit(&l->count, memory_order_acquire)) != -k)
		xfutex_wait((_Atomic uint32_t *)&l->count, (uint32_t)c, 0, false);
}
