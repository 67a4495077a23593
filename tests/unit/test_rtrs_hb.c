/* RTRS heartbeat state machine (lib/rtrs/rtrs_hb.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>

#include "rtrs/rtrs_hb.h"

#define MS 1000000ull

static void defaults_are_the_kernels(void **state)
{
	struct rtrs_hb hb;

	(void)state;
	rtrs_hb_init(&hb, 0, 0, 1000);
	assert_int_equal(hb.interval_ns, 5000 * MS);
	assert_int_equal(hb.missed_max, 5);
	assert_int_equal(rtrs_hb_next(&hb), 1000 + 5000 * MS);
	assert_int_equal(hb.latency_ns, -1);
}

static void silent_peer_is_dead_after_missed_max(void **state)
{
	struct rtrs_hb hb;
	uint64_t t = 0;
	int sends = 0, tick;

	(void)state;
	rtrs_hb_init(&hb, 100, 5, t);
	assert_int_equal(rtrs_hb_tick(&hb, t + 50 * MS), RTRS_HB_IDLE);	/* not due */
	for (tick = 1; tick <= 20; tick++) {
		t += 100 * MS;
		enum rtrs_hb_action a = rtrs_hb_tick(&hb, t);

		if (a == RTRS_HB_SEND)
			sends++;
		if (a == RTRS_HB_DEAD)
			break;
	}
	/* one beat, then 5 silent intervals tolerated: dead at the 7th tick,
	 * 600 ms after the beat (the kernel's ~30 s with 5 s intervals) */
	assert_int_equal(tick, 7);
	assert_int_equal(sends, 1);
}

/* Whatever the moment the peer was last heard, the path is given up no
 * later than rtrs_hb_detect_ns() after it, and, heard just after a
 * tick, no earlier than one interval before that bound: it is the bound
 * a caller can wait for (rtrs-client map's kernel request timeout). */
static void detect_bound_holds(void **state)
{
	const char *env = getenv("XPRT_SEED");
	unsigned seed = env ? (unsigned)strtoul(env, NULL, 0) : 0x5eed0bu;

	(void)state;
	srand(seed);
	for (int trial = 0; trial < 500; trial++) {
		uint32_t iv = 1 + (uint32_t)(rand() % 5000), mm = (uint32_t)(rand() % 8);
		uint64_t bound = rtrs_hb_detect_ns(iv, mm), ivn = (iv ? iv : 5000) * MS, t = 0;
		uint64_t heard = 0, limit = 1000 * ivn;
		int ticks_heard = rand() % 20;
		struct rtrs_hb hb;

		rtrs_hb_init(&hb, iv, mm, t);
		for (;;) {
			t = rtrs_hb_next(&hb);
			if (ticks_heard-- > 0) {
				/* traffic somewhere before the next tick */
				assert_int_not_equal(rtrs_hb_tick(&hb, t), RTRS_HB_DEAD);
				heard = t + (uint64_t)rand() % ivn;
				if (trial % 4 == 0)
					heard = t + 1;	/* the worst case */
				rtrs_hb_heard(&hb);
				continue;
			}
			if (rtrs_hb_tick(&hb, t) == RTRS_HB_DEAD)
				break;
			if (t > limit) {
				fprintf(stderr, "seed %#x trial %d: never dead\n", seed, trial);
				fail();
			}
		}
		if (t - heard > bound || (trial % 4 == 0 && heard && t - heard + ivn < bound)) {
			fprintf(stderr, "seed %#x trial %d: interval %u ms, missed %u: dead %llu ns "
				"after the last word, bound %llu\n", seed, trial, iv, mm,
				(unsigned long long)(t - heard), (unsigned long long)bound);
			fail();
		}
	}
	assert_int_equal(rtrs_hb_detect_ns(0, 0), 35000 * MS);
}

static void traffic_keeps_the_path_alive(void **state)
{
	struct rtrs_hb hb;
	uint64_t t = 0;
	int sends = 0;

	(void)state;
	rtrs_hb_init(&hb, 100, 2, t);
	for (int tick = 1; tick <= 50; tick++) {
		t += 100 * MS;
		enum rtrs_hb_action a = rtrs_hb_tick(&hb, t);

		assert_int_not_equal(a, RTRS_HB_DEAD);
		sends += a == RTRS_HB_SEND;
		rtrs_hb_heard(&hb);	/* IO keeps arriving */
	}
	assert_int_equal(sends, 50);	/* a beat every interval */
}

static void ack_gives_latency(void **state)
{
	struct rtrs_hb hb;

	(void)state;
	rtrs_hb_init(&hb, 100, 5, 0);
	assert_int_equal(rtrs_hb_tick(&hb, 100 * MS), RTRS_HB_SEND);
	rtrs_hb_acked(&hb, 100 * MS + 42000);
	assert_int_equal(hb.latency_ns, 42000);
	assert_int_equal(hb.missed, 0);
	/* a stray second ACK does not invent a latency */
	rtrs_hb_acked(&hb, 300 * MS);
	assert_int_equal(hb.latency_ns, 42000);
}

static void late_wakeup_does_not_burst(void **state)
{
	struct rtrs_hb hb;

	(void)state;
	rtrs_hb_init(&hb, 100, 5, 0);
	assert_int_equal(rtrs_hb_tick(&hb, 1000 * MS), RTRS_HB_SEND);
	assert_int_equal(rtrs_hb_next(&hb), 1100 * MS);
	assert_int_equal(rtrs_hb_tick(&hb, 1000 * MS + 1), RTRS_HB_IDLE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(defaults_are_the_kernels),
		cmocka_unit_test(silent_peer_is_dead_after_missed_max),
		cmocka_unit_test(detect_bound_holds),
		cmocka_unit_test(traffic_keeps_the_path_alive),
		cmocka_unit_test(ack_gives_latency),
		cmocka_unit_test(late_wakeup_does_not_burst),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
