/* RTRS heartbeat state machine (lib/rtrs/rtrs_hb.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

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
		cmocka_unit_test(traffic_keeps_the_path_alive),
		cmocka_unit_test(ack_gives_latency),
		cmocka_unit_test(late_wakeup_does_not_burst),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
