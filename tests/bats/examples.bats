#!/usr/bin/env bats
# The programming examples of doc/examples (GM-style ports, seed 001) run
# as a user runs them: a server and its clients over shm:// and tcp://, a
# peer that goes away, and what each says and exits with.
#
# Point the tests at another build with EXAMPLES=build-san/examples.

bats_require_minimum_version 1.5.0
load common

EXAMPLES=${EXAMPLES:-$BATS_TEST_DIRNAME/../../build/examples}
case $EXAMPLES in
/*) ;;
*) EXAMPLES=$PWD/$EXAMPLES ;;
esac

BG_PIDS=()

setup() {
	[ -x "$EXAMPLES/gm-pingpong" ] || die "$EXAMPLES/gm-pingpong is not built (run make examples)"
	SHM="xpe$$-${BATS_TEST_NUMBER}"
	BG_PIDS=()
	SRV_OUT="$BATS_TEST_TMPDIR/serve.out"
	SRV_ERR="$BATS_TEST_TMPDIR/serve.err"
}

teardown() {
	kill_bg
	rm_mailboxes "$SHM"
}

# start_bg PROG ARGS...: starts an example's server side and waits for its
# "listening on URI" line.  Sets SRV_PID, and SRV_URI (for tcp://HOST:0,
# with the real port).
start_bg() {
	local port
	"$@" >"$SRV_OUT" 2>"$SRV_ERR" &
	SRV_PID=$!
	BG_PIDS+=($SRV_PID)
	wait_listening "${1##*/}" "$SRV_PID" "$SRV_OUT" "$SRV_ERR" || return 1
	SRV_URI=$(sed -n 's/^listening on \([^ ]*\).*/\1/p' "$SRV_OUT")
	port=$(sed -n 's/^listening .*(port \([0-9]*\))$/\1/p' "$SRV_OUT")
	[ -z "$port" ] || SRV_URI=${SRV_URI%:0}:$port
}

@test "gm-pingpong: round trips of random sizes over shm and tcp, client after client" {
	local seed=${SEED:-$RANDOM} uri size i
	echo "# seed $seed" >&3
	RANDOM=$seed
	for uri in "shm://$SHM" "tcp://127.0.0.1:0"; do
		start_bg "$EXAMPLES/gm-pingpong" serve "$uri"
		# each client's last echo is acknowledged as the client closes:
		# the server hears of no failure
		for i in 1 2 3 4 5 6 7 8; do
			size=$(( i == 1 ? 0 : (RANDOM * 4 + RANDOM) % 131065 ))
			run_limited 60 gm-pingpong 0 "$EXAMPLES/gm-pingpong" "$SRV_URI" 150 "$size"
			[[ $output == "150 round trips of $size bytes over $SRV_URI: "*" us average" ]] ||
				die "$output"
		done
		kill -TERM "$SRV_PID"
		wait "$SRV_PID" || die "the server exited $? on SIGTERM: $(cat "$SRV_ERR")"
		[ ! -s "$SRV_ERR" ] || die "the server said: $(cat "$SRV_ERR")"
	done
}

@test "gm-pingpong: no server, a size beyond the buffers, numbers that are not" {
	run_limited 60 gm-pingpong 1 "$EXAMPLES/gm-pingpong" "shm://$SHM-none" 1
	[[ $stderr == "gm-pingpong: "*"$SHM-none"* ]] || die "$stderr"
	run_limited 60 gm-pingpong 2 "$EXAMPLES/gm-pingpong" "shm://$SHM" 1 131065
	[ "$stderr" = "gm-pingpong: SIZE 131065 over 131064" ] || die "$stderr"
	run_limited 60 gm-pingpong 2 "$EXAMPLES/gm-pingpong"
	run_limited 60 gm-pingpong 2 "$EXAMPLES/gm-pingpong" "shm://$SHM" abc
	run_limited 60 gm-pingpong 2 "$EXAMPLES/gm-pingpong" "shm://$SHM" 10 -1
	run_limited 60 gm-prodcons 2 "$EXAMPLES/gm-prodcons" produce "shm://$SHM" 12x
}

@test "gm-prodcons: both priorities arrive whole and in order over shm and tcp" {
	local uri
	for uri in "shm://$SHM" "tcp://127.0.0.1:0"; do
		start_bg "$EXAMPLES/gm-prodcons" consume "$uri"
		run_limited 60 gm-prodcons 0 "$EXAMPLES/gm-prodcons" produce "$SRV_URI" 2000
		[ "$output" = "produced 2000 data messages and 250 control messages" ] || die "$output"
		wait "$SRV_PID" || die "the consumer exited $?: $(cat "$SRV_ERR")"
		grep -q '^consumed 2000 data messages (65536000 bytes) and 250 control messages, in order; ' \
			"$SRV_OUT" || die "$(cat "$SRV_OUT")"
	done
}

@test "gm-prodcons: a consumer that dies mid-stream fails the producer, with GM's status" {
	start_bg "$EXAMPLES/gm-prodcons" consume "shm://$SHM"
	"$EXAMPLES/gm-prodcons" produce "shm://$SHM" 100000000 >"$BATS_TEST_TMPDIR/p.out" \
		2>"$BATS_TEST_TMPDIR/p.err" &
	local p=$!
	BG_PIDS+=($p)
	sleep 0.5
	kill -KILL "$SRV_PID"
	local rc=0
	timeout 30 tail --pid=$p -f /dev/null || die "the producer did not notice"
	wait "$p" || rc=$?
	[ "$rc" -eq 1 ] || die "producer exit status $rc"
	[[ $(cat "$BATS_TEST_TMPDIR/p.err") == "gm-prodcons: target node unreachable after "*" data messages" ]] ||
		die "$(cat "$BATS_TEST_TMPDIR/p.err")"
}

@test "gm-prodcons: a consumer that stops for longer than the producer waits fails both" {
	start_bg "$EXAMPLES/gm-prodcons" consume "tcp://127.0.0.1:0"
	"$EXAMPLES/gm-prodcons" produce "$SRV_URI" 100000000 >"$BATS_TEST_TMPDIR/p.out" \
		2>"$BATS_TEST_TMPDIR/p.err" &
	local p=$! rc=0
	BG_PIDS+=($p)
	sleep 0.3
	kill -STOP "$SRV_PID"
	timeout 30 tail --pid=$p -f /dev/null || die "the producer did not give up"
	wait "$p" || rc=$?
	kill -CONT "$SRV_PID"
	[ "$rc" -eq 1 ] || die "producer exit status $rc: $(cat "$BATS_TEST_TMPDIR/p.out")"
	[[ $(cat "$BATS_TEST_TMPDIR/p.err") == "gm-prodcons: no progress for 5 s after "*" data messages" ]] ||
		die "$(cat "$BATS_TEST_TMPDIR/p.err")"
	[ ! -s "$BATS_TEST_TMPDIR/p.out" ] || die "the producer claimed: $(cat "$BATS_TEST_TMPDIR/p.out")"
	# the consumer, its producer gone without END, waits 10 s and gives up
	rc=0
	timeout 30 tail --pid="$SRV_PID" -f /dev/null || die "the consumer did not give up"
	wait "$SRV_PID" || rc=$?
	[ "$rc" -eq 1 ] || die "consumer exit status $rc"
	grep -q "^gm-prodcons: nothing for 10 s after " "$SRV_ERR" || die "$(cat "$SRV_ERR")"
}
