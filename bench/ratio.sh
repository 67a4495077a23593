# bench/ratio.sh -- sourced by the bench scripts (bench/run, bench/xprobe-run,
# bench/ibcache-run, bench/rtrs-run): one rule for every table's ratio column.
#
# bench_ratio OURS PEER KIND TARGET
#   KIND fwd: ours/peer (bandwidth: > 1 is faster), inv: peer/ours (latency)
#   prints "RATIO MET": the ratio cut (not rounded) to three decimals, and
#   yes/no against TARGET judged on the ratio itself: 0.7998 shows as 0.799
#   and does not reach 0.8 (rounded, it would show as 0.800 or 0.80 and look
#   met); MET is "-" when TARGET is "-", and both are "-" when a figure is
#   missing ("-") or not positive.
bench_ratio() {
	awk -v o="$1" -v p="$2" -v k="$3" -v t="$4" 'BEGIN {
		if (o == "-" || p == "-" || o + 0 <= 0 || p + 0 <= 0) { print "- -"; exit }
		r = k == "inv" ? p / o : o / p
		printf "%.3f %s\n", int(r * 1000 + 1e-9) / 1000, t == "-" ? "-" : (r >= t + 0 ? "yes" : "no")
	}'
}
