#!/usr/bin/env bats
# A cache that spreads (seed 004's cooperative page cache): sixteen hosts,
# network namespaces on one bridge at MTU 9000.  Host 1 has the file; hosts
# 2..16 fetch it all at once, each other's peers (one --peers directory for
# all), each keeping what it fetched (--cache) in the export its own
# ibcache-serve answers from.  Every copy is byte-exact, and host 1 sends
# about twice the file, not fifteen times.  The same fetch without the
# cooperation (host 1 the only peer) runs too, and both times are printed.

bats_require_minimum_version 1.5.0
load ibcache_helpers

F=$IBCACHE_FETCH
S=$IBCACHE_SERVE

N=16
MB=${IBC_CLUSTER_MB:-32}

cl_ns() { echo "xt-c$1-$CL_ID"; }

# cl_setup: the hub namespace with the bridge, and N hosts on it, host k
# at 198.18.2.k.
cl_setup() {
	local k ns
	CL_ID=$$
	ip netns add "$(cl_ns hub)" || die "cannot create network namespaces"
	ip -n "$(cl_ns hub)" link add br0 type bridge || skip "this kernel makes no bridge devices"
	ip -n "$(cl_ns hub)" link set br0 mtu 9000 up
	for ((k = 1; k <= N; k++)); do
		ns=$(cl_ns "$k")
		ip netns add "$ns"
		ip link add "xc$k-${CL_ID: -5}" netns "$ns" type veth peer name "xh$k-${CL_ID: -5}" \
			netns "$(cl_ns hub)" || die "cannot create veth pair $k"
		ip -n "$ns" link set lo up
		ip -n "$ns" link set "xc$k-${CL_ID: -5}" mtu 9000 up
		ip -n "$ns" addr add "198.18.2.$k/24" dev "xc$k-${CL_ID: -5}"
		ip -n "$(cl_ns hub)" link set "xh$k-${CL_ID: -5}" mtu 9000 master br0 up
	done
}

cl_teardown() {
	local k ns
	[ -n "${CL_ID:-}" ] || return 0
	for k in hub $(seq 1 $N); do
		ns=$(cl_ns "$k")
		ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
		ip netns del "$ns" 2>/dev/null
	done
	return 0
}

teardown() {
	kill_bg
	cl_teardown
}

# cl_serve K: ibcache-serve of host K on its export $T/nK.
cl_serve() {
	mkdir -p "$T/n$1"
	ip netns exec "$(cl_ns "$1")" "$S" -e "$T/n$1" -l "udp://198.18.2.$1:7480" --spin 0 \
		--ctl "$T/ctl.$1" >"$T/serve.$1.out" 2>"$T/serve.$1.err" &
	BG_PIDS+=($!)
	disown $! 2>/dev/null
}

cl_wait_serving() {
	local k
	for k in "$@"; do
		for _ in $(seq 1 200); do
			grep -q '^listening' "$T/serve.$k.out" 2>/dev/null && break
			sleep 0.05
		done
		grep -q '^listening' "$T/serve.$k.out" || die "host $k: $(cat "$T/serve.$k.err")"
	done
}

# cl_fetch_all PEERS_YAML CACHE(0/1): hosts 2..N fetch f at once; their
# outputs in $T/out.K, statistics in $T/stats.K; the wall time in $WALL.
cl_fetch_all() {
	local k pids=() t0 cache=()
	t0=$(date +%s.%N)
	for ((k = 2; k <= N; k++)); do
		[ "$2" = 1 ] && cache=(--cache "$T/n$k")
		ip netns exec "$(cl_ns "$k")" timeout 300 "$F" --peers "$1" --gen "$GEN" --size "$SIZE" \
			"${cache[@]}" --spin 1ns --timeout 2000 --stats -o json f >"$T/out.$k" 2>"$T/stats.$k" &
		pids+=($!)
	done
	for k in "${!pids[@]}"; do
		wait "${pids[$k]}" || die "host $((k + 2)): fetch failed: $(sed '/^{/,$d' "$T/stats.$((k + 2))")"
	done
	WALL=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
}

@test "sixteen hosts, one file: every copy byte-exact, host 1 sends about twice the file, not fifteen times" {
	netns_available_cl || skip "network namespaces need root and iproute2 ($(id -un))"
	T=$BATS_TEST_TMPDIR
	cl_setup
	mkdir -p "$T/n1"
	head -c $((MB << 20)) /dev/urandom >"$T/n1/f"
	SIZE=$(stat -c %s "$T/n1/f")
	# the generation host 1's server gives the file (from its size and mtime)
	GEN=$("$F" --origin "$T/n1/f" --pages 0 f --stats -o json 2>&1 >/dev/null |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["gen"])')
	[ -n "$GEN" ] || die "no generation"
	{
		echo "block: 64k"
		echo "exports:"
		echo "  - prefix: /"
		printf '    peers: ['
		for ((k = 1; k <= N; k++)); do printf 'udp://198.18.2.%d:7480%s' "$k" "$([ $k -lt $N ] && echo ", ")"; done
		echo "]"
	} >"$T/all.yaml"
	printf 'exports:\n  - prefix: /\n    peers: [udp://198.18.2.1:7480]\n' >"$T/one.yaml"

	# without cooperation: every host from host 1
	cl_serve 1
	cl_wait_serving 1
	cl_fetch_all "$T/one.yaml" 0
	for ((k = 2; k <= N; k++)); do same "$T/out.$k" "$T/n1/f"; done
	local alone=$WALL sent_alone
	sent_alone=$(srv_status pages_sent "$T/ctl.1")

	# with it: each host keeps what it fetched and serves it (host 1's
	# server goes on; what it sends from here is counted from here)
	for ((k = 2; k <= N; k++)); do cl_serve "$k"; done
	cl_wait_serving $(seq 2 $N)
	cl_fetch_all "$T/all.yaml" 1
	local pages=$(((SIZE + 4095) / 4096)) sent home=0 peer=0
	for ((k = 2; k <= N; k++)); do
		same "$T/out.$k" "$T/n1/f"
		same "$T/n$k/f" "$T/n1/f"	# the cache is whole
		STATS=$(sed -n '/^{/,$p' "$T/stats.$k")
		[ "$(stat_of origin_pages)" -eq 0 ] || die "host $k read an origin: $STATS"
		home=$((home + $(stat_of home_pages)))
		peer=$((peer + $(stat_of peer_pages)))
	done
	sent=$(($(srv_status pages_sent "$T/ctl.1") - sent_alone))
	echo "# $MB MiB to 15 hosts: host 1 sent $sent pages with the cache (${pages} a copy; " \
		"$(awk -v a="$sent" -v b="$pages" 'BEGIN { printf "%.2f", a / b }')x), $sent_alone without" >&3
	echo "# time to the last copy: $WALL s cooperating, $alone s all from host 1" >&3
	echo "# pages fetched first by their block's home: $home (a copy is $pages pages)" >&3
	[ "$sent_alone" -ge $((15 * pages)) ] || die "without the cache host 1 sent only $sent_alone"
	[ "$home" -gt $((pages / 2)) ] || die "homes fetched only $home pages first"
	# about twice the file; fifteen times without
	[ "$sent" -le $((5 * pages / 2)) ] || die "host 1 sent $sent pages, $((sent / pages))x the file"
}

netns_available_cl() {
	[ "$(id -u)" = 0 ] && command -v ip >/dev/null &&
		ip netns add "xt-probe-$$" 2>/dev/null && ip netns del "xt-probe-$$"
}
