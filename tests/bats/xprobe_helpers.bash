# Helpers for the xprobe bats tests (same style as helpers.bash): every
# wait is bounded, teardown kills what a test started and removes its
# shared-memory mailboxes.
#
# Point the tests at another build with XPROBE=build-san/xprobe.

XPROBE=${XPROBE:-$BATS_TEST_DIRNAME/../../build/xprobe}
case $XPROBE in
/*) ;;
*) XPROBE=$PWD/$XPROBE ;;
esac

BG_PIDS=()

# shellcheck source=common.bash
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

setup() {
	[ -x "$XPROBE" ] || die "$XPROBE is not built (run make)"
	SHM="xpb$$-${BATS_TEST_NUMBER}"
	BG_PIDS=()
	SRV_OUT="$BATS_TEST_TMPDIR/serve.out"
	SRV_ERR="$BATS_TEST_TMPDIR/serve.err"
}

teardown() {
	kill_bg
	rm_mailboxes "$SHM"
}


# run_xprobe EXPECTED_RC ARGS...: runs xprobe ARGS with a 60 s limit.
run_xprobe() {
	run_limited 60 xprobe "$1" "$XPROBE" "${@:2}"
}



# start_server [OPTION...] URI...: starts xprobe serve in the background and waits for
# one "listening" line per URI.  Sets SRV_PID and URIS (the bound URIs, in
# order: port 0 replaced by the real port).
start_server() {
	local n=0 a
	for a in "$@"; do [[ $a == *://* ]] && n=$((n + 1)); done
	rm -f "$SRV_OUT"	# (a restart must not find the last run's lines)
	"$XPROBE" serve "$@" >"$SRV_OUT" 2>"$SRV_ERR" 3>&- &
	SRV_PID=$!
	BG_PIDS+=($SRV_PID)
	wait_listening "xprobe serve" "$SRV_PID" "$SRV_OUT" "$SRV_ERR" "$n" || return 1
	mapfile -t URIS < <(sed -n 's/^listening //p' "$SRV_OUT")
}

# interrupted OUT ERR ARGS...: xprobe ARGS in the background (stdout to
# OUT, stderr to ERR), SIGINT after half a second; sets RC to its exit
# status.
interrupted() {
	local out=$1 err=$2 pid
	shift 2
	"$XPROBE" "$@" >"$out" 2>"$err" 3>&- &
	pid=$!
	BG_PIDS+=($pid)
	sleep 0.5
	kill -INT $pid
	RC=0
	wait $pid || RC=$?
}

# json_get JSON KEY: a top-level value, or a.b.0.c for nested ones (numbers
# index lists).  Booleans print as true/false; a missing key fails.
json_get() {
	python3 -c 'import json,sys
v=json.loads(sys.argv[1])
for k in sys.argv[2].split("."): v=v[int(k)] if isinstance(v,list) else v[k]
print(v if not isinstance(v,bool) else str(v).lower())' "$1" "$2"
}

# free_tcp_port: a port nothing listens on (common.bash).
free_tcp_port() {
	unused_tcp_port
}
