#!/usr/bin/env bats
# The bench tables' ratio column (bench/ratio.sh, used by bench/run,
# bench/xprobe-run, bench/ibcache-run and bench/rtrs-run): a target is met
# by the ratio itself, never by its rounding.

bats_require_minimum_version 1.5.0

setup() {
	# shellcheck source=../../bench/ratio.sh
	. "$BATS_TEST_DIRNAME/../../bench/ratio.sh"
}

@test "a latency ratio just under the target is not met, and does not print as met" {
	run bench_ratio 16.45 13.14 inv 0.8	# 0.7988: rounded to two decimals, 0.80
	[ "$status" -eq 0 ]
	[ "$output" = "0.798 no" ]
}

@test "a ratio exactly at the target is met" {
	run bench_ratio 10 8 inv 0.8
	[ "$output" = "0.800 yes" ]
	run bench_ratio 9 10 fwd 0.9
	[ "$output" = "0.900 yes" ]
}

@test "bandwidth ratios are ours over peer, latency ratios peer over ours" {
	run bench_ratio 45.7 54.5 fwd 0.8
	[ "$output" = "0.838 yes" ]
	run bench_ratio 3.6 33.2 inv 0.91
	[ "$output" = "9.222 yes" ]
}

@test "no target: the ratio alone; a missing or zero figure: no ratio" {
	run bench_ratio 2 1 fwd -
	[ "$output" = "2.000 -" ]
	run bench_ratio - 3 fwd 0.8
	[ "$output" = "- -" ]
	run bench_ratio 3 0 fwd 0.8
	[ "$output" = "- -" ]
	run bench_ratio "" 1 inv 0.9
	[ "$output" = "- -" ]
}
