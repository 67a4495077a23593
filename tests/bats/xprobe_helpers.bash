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

die() {
	echo "# $*" >&2
	return 1
}

setup() {
	[ -x "$XPROBE" ] || die "$XPROBE is not built (run make)"
	SHM="xpb$$-${BATS_TEST_NUMBER}"
	BG_PIDS=()
	SRV_OUT="$BATS_TEST_TMPDIR/serve.out"
	SRV_ERR="$BATS_TEST_TMPDIR/serve.err"
}

teardown() {
	local pid f

	for pid in "${BG_PIDS[@]}"; do
		kill -KILL "$pid" 2>/dev/null || true
	done
	for f in /dev/shm/xprt-shmcm-"$SHM"*; do
		[ -e "$f" ] && rm -f "$f"
	done
	return 0
}

show_run() {
	echo "# command: $1"
	echo "# rc: $status (expected $2)"
	echo "# stdout:"
	printf '%s\n' "$output" | sed 's/^/#   /'
	echo "# stderr:"
	printf '%s\n' "$stderr" | sed 's/^/#   /'
	if [ -e "$SRV_ERR" ]; then
		echo "# server stderr:"
		sed 's/^/#   /' "$SRV_ERR"
	fi
}

# run_xprobe EXPECTED_RC ARGS...: runs xprobe ARGS with a 60 s limit.
run_xprobe() {
	local expected=$1
	shift
	run --separate-stderr timeout 60 "$XPROBE" "$@"
	if [ "$status" -ne "$expected" ]; then
		show_run "xprobe $*" "$expected"
		return 1
	fi
}

# expect_stderr_line STRING: stderr is exactly one line, STRING.
expect_stderr_line() {
	[ "$stderr" = "$1" ] || die "stderr was: '$stderr'; expected: '$1'"
}

# expect_stderr_match REGEX: stderr is one line matching REGEX.
expect_stderr_match() {
	[ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ] || die "stderr is not one line: '$stderr'"
	[[ $stderr =~ $1 ]] || die "stderr '$stderr' does not match '$1'"
}

# start_server [OPTION...] URI...: starts xprobe serve in the background and waits for
# one "listening" line per URI.  Sets SRV_PID and URIS (the bound URIs, in
# order: port 0 replaced by the real port).
start_server() {
	local n=0 i a
	for a in "$@"; do [[ $a == *://* ]] && n=$((n + 1)); done
	"$XPROBE" serve "$@" >"$SRV_OUT" 2>"$SRV_ERR" 3>&- &
	SRV_PID=$!
	BG_PIDS+=($SRV_PID)
	for i in $(seq 1 200); do
		[ "$(grep -c '^listening ' "$SRV_OUT" 2>/dev/null)" -ge "$n" ] && break
		kill -0 "$SRV_PID" 2>/dev/null || { cat "$SRV_ERR" >&2; die "xprobe serve died"; return 1; }
		sleep 0.05
	done
	[ "$(grep -c '^listening ' "$SRV_OUT")" -ge "$n" ] || die "xprobe serve did not start: $(cat "$SRV_ERR")"
	mapfile -t URIS < <(sed -n 's/^listening //p' "$SRV_OUT")
}

# json_get JSON KEY: a top-level value, or a.b.0.c for nested ones (numbers
# index lists).  Booleans print as true/false; a missing key fails.
json_get() {
	python3 -c 'import json,sys
v=json.loads(sys.argv[1])
for k in sys.argv[2].split("."): v=v[int(k)] if isinstance(v,list) else v[k]
print(v if not isinstance(v,bool) else str(v).lower())' "$1" "$2"
}

# free_tcp_port: a port nothing listens on (bound then released).
free_tcp_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
