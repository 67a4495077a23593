#!/usr/bin/env bats
# xprobe over rdma:// and ud:// -- run inside tests/vm/xprt-vm (Soft-RoCE
# rxe0 on 10.200.0.1) by tests/vm/run-tests; the same checks the host runs
# over shm, tcp and udp in tests/bats/xprobe.bats.

bats_require_minimum_version 1.5.0
load ../bats/xprobe_helpers

IP=${XPRT_VM_IP:-10.200.0.1}

@test "devices shows the rxe device with an active port and its GIDs" {
	run_xprobe 0 devices
	[[ $output == *rxe0* ]] || die "no rxe0"
	[[ $output == *ACTIVE* ]] || die "no active port"
	run_xprobe 0 devices -o json
	python3 -c 'import json,sys
d=json.loads(sys.argv[1])
p=[x for x in d["rdma_devices"] if x["device"]=="rxe0"][0]
assert p["state"].upper().startswith("ACTIVE"), p
assert p["active_mtu"] in (256, 512, 1024, 2048, 4096), p
assert any(g["type"]=="RoCE v2" and "10.200.0.1" in g["gid"] for g in p["gids"]), p["gids"]
t={x["transport"]:x["usable"] for x in d["transports"]}
assert t["rdma"] and t["ud"], t' "$output"
}

@test "ping over rdma" {
	start_server "rdma://$IP:0"
	run_xprobe 0 ping "${URIS[0]}" -c 3 -i 0.01
	[[ ${lines[0]} == "PING ${URIS[0]} (rdma): 8 bytes, low priority" ]] || die "${lines[0]}"
	[[ $output == *"3 sent, 3 received, 0.0% loss"* ]]
}

@test "ping over ud" {
	start_server "ud://$IP:0"
	run_xprobe 0 ping "${URIS[0]}" -c 3 -i 0.01
	[[ ${lines[0]} == "PING ${URIS[0]} (ud): 16 bytes" ]] || die "${lines[0]}"
	[[ $output == *"3 sent, 3 received, 0.0% loss"* ]]
}

@test "large messages over rdma, both priorities, json" {
	start_server "rdma://$IP:0"
	run_xprobe 0 ping "${URIS[0]}" -c 3 -i 0 -s 1M -q
	[[ $output == *"3 sent, 3 received"* ]]
	run_xprobe 0 ping "${URIS[0]}" -c 20 -i 0 --prio high -o json
	[ "$(json_get "$output" received)" -eq 20 ]
	[ "$(json_get "$output" transport)" = rdma ]
}

@test "bw over rdma is acknowledged and counted by the server" {
	start_server "rdma://$IP:0"
	run_xprobe 0 bw "${URIS[0]}" -T 1 -o json
	local m s
	m=$(json_get "$output" messages)
	s=$(json_get "$output" server_messages)
	[ "$m" -gt 0 ] && [ "$s" -eq "$m" ]
}

@test "verbs tests over rdma: write, read and send, immediates, inline or not, checked" {
	local op imm inl
	start_server "rdma://$IP:0"
	for op in write read send; do
		for imm in "" --imm; do
			[ "$op" = read ] && [ -n "$imm" ] && continue
			for inl in "" "--inline 0"; do
				# shellcheck disable=SC2086
				run_xprobe 0 ping "${URIS[0]}" --op $op $imm $inl -s 32 -c 200 -i 0 -o json
				[ "$(json_get "$output" received)" = 200 ] || die "ping $op $imm $inl: $output"
				# shellcheck disable=SC2086
				run_xprobe 0 bw "${URIS[0]}" --op $op $imm $inl -s 100000 -T 0.5 -o json
				[ "$(json_get "$output" messages)" -gt 0 ] || die "bw $op $imm $inl: $output"
			done
		done
	done
	run_xprobe 0 ping "${URIS[0]}" --op write -s 8 -c 3 -i 0
	[[ ${lines[0]} == "PING ${URIS[0]} (rdma): 8 bytes, RDMA write, inline up to "*" bytes" ]] ||
		die "${lines[0]}"
}

@test "bw over ud reports loss; the MTU is the port's" {
	start_server "ud://$IP:0"
	run_xprobe 0 bw "${URIS[0]}" -T 1 -o json
	local m s
	m=$(json_get "$output" messages)
	s=$(json_get "$output" server_messages)
	[ "$m" -gt 0 ] && [ "$s" -gt 0 ] && [ "$s" -le "$m" ]
	[ "$(json_get "$output" size)" -le 4096 ]
	run_xprobe 1 ping "${URIS[0]}" -c 1 -s 5000
	expect_stderr_match "beyond the ud MTU of [0-9]+ bytes"
}

@test "auto picks rdma when a device is active" {
	start_server "rdma://$IP:0"
	local port=${URIS[0]##*:}
	run_xprobe 0 ping "$IP:$port" -c 1 -v
	[[ $stderr == *"auto: rdma"* ]] || die "$stderr"
	[[ $output == *"(rdma)"* ]]
}

@test "refused rdma endpoint and a server that goes away" {
	run_xprobe 1 ping "rdma://$IP:9" -c 1
	expect_stderr_match "rdma://$IP:9"
	start_server "rdma://$IP:0"
	"$XPROBE" bw "${URIS[0]}" -T 30 -q >"$BATS_TEST_TMPDIR/bw.out" 2>"$BATS_TEST_TMPDIR/bw.err" 3>&- &
	local pid=$! rc=0
	BG_PIDS+=($pid)
	sleep 1
	kill -KILL "$SRV_PID"
	timeout 20 tail --pid=$pid -f /dev/null || true
	wait $pid || rc=$?
	[ "$rc" -eq 1 ] || die "bw exited $rc: $(cat "$BATS_TEST_TMPDIR/bw.err")"
	[ "$(wc -l <"$BATS_TEST_TMPDIR/bw.err")" -eq 1 ] || die "$(cat "$BATS_TEST_TMPDIR/bw.err")"
}

@test "serve keeps serving after a client is killed" {
	start_server "rdma://$IP:0" "ud://$IP:0"
	"$XPROBE" bw "${URIS[0]}" -T 30 -q >/dev/null 2>&1 3>&- &
	local pid=$!
	BG_PIDS+=($pid)
	sleep 1
	kill -KILL $pid
	run_xprobe 0 ping "${URIS[0]}" -c 3 -i 0 -q
	[[ $output == *"3 sent, 3 received"* ]]
	run_xprobe 0 ping "${URIS[1]}" -c 3 -i 0 -q
	[[ $output == *"3 sent, 3 received"* ]]
}

# Regression: the CQ armed at creation left an event unread, and an idle
# client then spun in epoll at 100% CPU between its pings.
@test "an idle rdma client sleeps between pings" {
	start_server "rdma://$IP:0"
	local t0 t1 try
	cpu() {	# user+system seconds of one ping run
		local t
		TIMEFORMAT='%U %S'
		t=$( { time "$XPROBE" ping "${URIS[0]}" "$@" --spin 0 -q >/dev/null 2>&1; } 2>&1 )
		awk -v u="${t% *}" -v s="${t#* }" 'BEGIN { printf "%.3f", u + s }'
	}
	# Setting up (registering the link's buffers) costs the same in both
	# runs and, under emulation, most of their CPU time; 2 s of idle
	# waiting between 5 pings must add little to it (a client spinning
	# in epoll would add about 2 s).
	for try in 1 2 3; do
		t0=$(cpu -c 1)
		t1=$(cpu -c 5 -i 0.5)
		awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 0.5) }' && return 0
		echo "# attempt $try: $t1 s of CPU for 5 pings over 2 s, $t0 s for one"
	done
	die "an idle client used $t1 s of CPU over 2 s of pinging (one ping: $t0 s)"
}
