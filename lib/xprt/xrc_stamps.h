/* Developer instrumentation of the rdma backend (`make STAMPS=1`, never in a
 * normal build): TSC stamps around the ibv_post_send of every send-queue post
 * (post_sq: sends, writes, reads; not window binds) and at every successful
 * receive completion a poll finds, summarised on stderr at exit:
 *
 *   xrc-stamps PID: N sends, N receives; post_send p50 X us, wait p50 Y us,
 *   turnaround p50 Z us; over 1 ms: post_send A, wait B, turnaround C
 *
 * post_send is the system call itself (on Soft-RoCE the kernel runs the
 * whole send in it: the peer's receive and the ACK); wait runs from its
 * return to the next receive found; turnaround from that receive to the next
 * post.  In a ping-pong the round trip is the sum of both ends' turnarounds
 * and deliveries.
 * The first STAMP_SKIP messages (warm-up) are left out.  x86 only (the TSC);
 * one connection's worth: every rdma connection of the process is counted
 * together. */
#ifndef XPRT_XRC_STAMPS_H
#define XPRT_XRC_STAMPS_H

#if !defined(__x86_64__) && !defined(__i386__)
#error "STAMPS=1 reads the x86 time-stamp counter: x86 only"
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#define STAMP_N		65536u
#define STAMP_SKIP	1000u

static uint64_t stamp_pre[STAMP_N], stamp_post[STAMP_N], stamp_rx[STAMP_N];
static uint32_t stamp_rx_after[STAMP_N];	/* sends posted before that receive */
static uint32_t stamp_ns, stamp_nr;

static inline void stamp_send_begin(void)
{
	if (stamp_ns < STAMP_N)
		stamp_pre[stamp_ns] = __rdtsc();
}

static inline void stamp_send_end(void)
{
	if (stamp_ns < STAMP_N)
		stamp_post[stamp_ns] = __rdtsc();
	stamp_ns++;
}

static inline void stamp_receive(void)
{
	if (stamp_nr < STAMP_N) {
		stamp_rx[stamp_nr] = __rdtsc();
		stamp_rx_after[stamp_nr] = stamp_ns;
	}
	stamp_nr++;
}

static int stamp_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* p50 of v[0..n) in us, and how many exceed 1 ms */
static double stamp_p50(uint64_t *v, uint32_t n, double cyc_per_us, uint32_t *over)
{
	*over = 0;
	for (uint32_t i = 0; i < n; i++)
		*over += v[i] > (uint64_t)(cyc_per_us * 1000);
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), stamp_cmp);
	return (double)v[n / 2] / cyc_per_us;
}

static void stamp_report(void)
{
	static uint64_t post[STAMP_N], wait[STAMP_N], turn[STAMP_N];
	uint32_t ns = stamp_ns < STAMP_N ? stamp_ns : STAMP_N;
	uint32_t nr = stamp_nr < STAMP_N ? stamp_nr : STAMP_N, np = 0, nw = 0, nt = 0, o1, o2, o3;
	struct timespec t0, t1;
	uint64_t c0, c1;
	double us;

	if (!ns && !nr)
		return;
	/* the TSC rate, against the clock, over 20 ms */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	c0 = __rdtsc();
	do
		clock_gettime(CLOCK_MONOTONIC, &t1);
	while ((t1.tv_sec - t0.tv_sec) * 1000000000ll + t1.tv_nsec - t0.tv_nsec < 20000000);
	c1 = __rdtsc();
	us = (double)(c1 - c0) /
	     ((double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3);
	for (uint32_t i = STAMP_SKIP; i < ns; i++)
		post[np++] = stamp_post[i] - stamp_pre[i];
	for (uint32_t j = STAMP_SKIP; j < nr; j++) {
		uint32_t k = stamp_rx_after[j];	/* the next send's index */

		if (k == 0 || k > ns)
			continue;
		wait[nw++] = stamp_rx[j] > stamp_post[k - 1] ? stamp_rx[j] - stamp_post[k - 1] : 0;
		if (k < ns && stamp_pre[k] >= stamp_rx[j])
			turn[nt++] = stamp_pre[k] - stamp_rx[j];
	}
	double p = stamp_p50(post, np, us, &o1), w = stamp_p50(wait, nw, us, &o2),
	       t = stamp_p50(turn, nt, us, &o3);

	fprintf(stderr, "xrc-stamps %d: %u sends, %u receives; post_send p50 %.2f us, "
		"wait p50 %.2f us, turnaround p50 %.2f us; over 1 ms: post_send %u, wait %u, "
		"turnaround %u\n", (int)getpid(), stamp_ns, stamp_nr, p, w, t, o1, o2, o3);
}

__attribute__((constructor)) static void stamp_init(void)
{
	atexit(stamp_report);
}

#endif
