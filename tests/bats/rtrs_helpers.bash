# What the rtrs-client bats files share: the binaries, a per-test runtime
# directory for control sockets, rtrs-server on a free port, status polling.
# Point the tests at another build with RTRS_CLIENT=build-san/rtrs-client
# (RTRS_SERVER defaults to the rtrs-server beside it).

RTRS_CLIENT=${RTRS_CLIENT:-$BATS_TEST_DIRNAME/../../build/rtrs-client}
case $RTRS_CLIENT in
/*) ;;
*) RTRS_CLIENT=$PWD/$RTRS_CLIENT ;;
esac

RTRS_SERVER=${RTRS_SERVER:-$(dirname "$RTRS_CLIENT")/rtrs-server}

# shellcheck source=common.bash
load common
# shellcheck source=netns.bash
load netns

setup() {
	[ -x "$RTRS_CLIENT" ] || die "$RTRS_CLIENT is not built (run make)"
	BG_PIDS=()
	T=$BATS_TEST_TMPDIR
	SRV_OUT=$T/serve.out
	SRV_ERR=$T/serve.err
	# the control sockets of these tests stay in their own directory
	export XDG_RUNTIME_DIR=$T/run
	mkdir -p -m 0700 "$XDG_RUNTIME_DIR"
}

teardown() {
	kill_bg
	[ -n "${LOOP:-}" ] && losetup -d "$LOOP"
	[ "${NS_PATHS:-0}" -gt 0 ] && netns_teardown
	return 0
}

# start_server PORT ARGS...: rtrs-server on 0.0.0.0:PORT (so 127.0.0.1 and
# 127.0.0.2 are two paths) with its own control socket; waits until it
# listens.  Sets SRV_PID.
start_server() {
	local port=$1
	shift
	[ -x "$RTRS_SERVER" ] || skip "rtrs-server not built ($RTRS_SERVER)"
	rm -f "$SRV_OUT"	# (a restart must not find the last run's lines)
	"$RTRS_SERVER" -l "tcp://0.0.0.0:$port" --ctl "$T/srv.sock" "$@" >"$SRV_OUT" 2>"$SRV_ERR" 3>&- &
	SRV_PID=$!
	BG_PIDS+=("$SRV_PID")
	wait_listening rtrs-server "$SRV_PID" "$SRV_OUT" "$SRV_ERR"
}

# json EXPR: a python expression over j, the JSON in $output
json() {
	python3 -c "import json,sys; j=json.loads(sys.argv[1]); print($1)" "$output"
}

# wait_status SESSION EXPR: until `status -o json` of SESSION makes EXPR
# true (at most 20 s); on failure the message ends with the last lines of
# $WAIT_STATUS_LOG when set (the session's stderr)
wait_status() {
	local i
	for i in $(seq 1 200); do
		run --separate-stderr "$RTRS_CLIENT" status -s "$1" -o json
		[ "$status" -eq 0 ] && [ "$(json "$2")" = True ] && return 0
		sleep 0.1
	done
	die "status of $1 never had $2: $output $stderr${WAIT_STATUS_LOG:+; $WAIT_STATUS_LOG: $(tail -n 5 "$WAIT_STATUS_LOG" 2>&1)}"
}

# run_clt EXPECTED_RC ARGS...: rtrs-client ARGS with a 30 s limit.
run_clt() {
	run_limited 30 rtrs-client "$1" "$RTRS_CLIENT" "${@:2}"
}

# A TCP port nothing listens on (common.bash).
free_port() {
	unused_tcp_port
}

