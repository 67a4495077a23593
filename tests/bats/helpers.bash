# Helpers for the mkshmcon bats tests, in the style of podman's
# test/system/helpers.bash: run_tool checks the exit status and shows the
# command's output only when it fails; every wait is bounded; teardown kills
# what a test started and removes the connections it created, so a failed
# test leaves nothing in /dev/shm.
#
# Point the tests at another build with MKSHMCON=build-san/mkshmcon.

MKSHMCON=${MKSHMCON:-$BATS_TEST_DIRNAME/../../build/mkshmcon}
case $MKSHMCON in
/*) ;;
*) MKSHMCON=$PWD/$MKSHMCON ;;
esac

# Connections of this test all start with CONN_PREFIX; CONN is the default one.
CONN_PREFIX=
CONN=
# Background processes started by this test (wrapper shells and tools).
BG_PIDS=()

# shellcheck source=common.bash
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

setup() {
	[ -x "$MKSHMCON" ] || die "$MKSHMCON is not built (run make)"
	CONN_PREFIX="bt$$-${BATS_TEST_NUMBER}-"
	CONN="${CONN_PREFIX}c"
	BG_PIDS=()
	ENDS="$BATS_TEST_TMPDIR/ends"
	mkdir -p "$ENDS"
}

teardown() {
	local pid f name

	# Stopped processes first get SIGCONT so that SIGKILL is not left
	# pending on a stopped process we then wait for.
	for pid in "${BG_PIDS[@]}" $(cat "$ENDS"/*/pid 2>/dev/null); do
		kill -CONT "$pid" 2>/dev/null || true
		kill -KILL "$pid" 2>/dev/null || true
	done
	for f in /dev/shm/xprt-shmcm-"$CONN_PREFIX"*; do
		[ -e "$f" ] || continue
		name=${f#/dev/shm/xprt-shmcm-}
		# if the tool cannot remove it, remove the file itself
		"$MKSHMCON" rm -f "$name" >/dev/null 2>&1 || rm -f "$f"
	done
}

# run_tool EXPECTED_RC ARGS...: runs mkshmcon ARGS with a 30 s limit;
# $output/$stderr/$status as bats sets them.  stdin is the caller's.
run_tool() {
	run_limited 30 mkshmcon "$1" "$MKSHMCON" "${@:2}"
}

# run_as PROG_PATH EXPECTED_RC ARGS...: like run_tool for another binary
# (e.g. the rmshmcon symlink).
run_as() {
	run_limited 30 "$1" "$2" "$1" "${@:3}"
}





# bg CMD...: runs CMD in the background (fd 3 closed, as bats requires),
# remembered for teardown.
bg() {
	"$@" 3>&- &
	BG_PIDS+=($!)
}

# now_ms: monotonic enough for the bounds we check.
now_ms() {
	local t=${EPOCHREALTIME/./}
	echo $((t / 1000))
}

# start_end ID NAME SIDE STDIN [CONNECT-ARGS...]: starts `mkshmcon connect
# NAME -x SIDE ARGS` in the background with stdin from STDIN, stdout to
# $ENDS/ID/out and stderr to $ENDS/ID/err.  Its pid lands in $ENDS/ID/pid,
# its exit status, once it ends, in $ENDS/ID/rc.
start_end() {
	local id=$1 name=$2 side=$3 in=$4 d=$ENDS/$1
	shift 4
	mkdir -p "$d"
	# an id used again: the last end's pid and status must not pass for
	# this one's (wait_end would return at once, before it is done); the
	# last end must be over, or it would write them later
	if [ -s "$d/pid" ] && [ ! -s "$d/rc" ] && kill -0 "$(cat "$d/pid")" 2>/dev/null; then
		die "end $id is still running"
		return 1
	fi
	rm -f "$d/pid" "$d/rc"
	(
		set +e	# bats' errexit would end this shell on a failing end
		# SIGHUP's default action, whatever the suite was started under
		# (nohup would leave it ignored, and so would the end), unless
		# END_HUP_IGNORED=1 asks for an end started as nohup starts it
		local pre=(env --default-signal=HUP)
		[ "${END_HUP_IGNORED:-0}" = 1 ] && pre=(bash -c 'trap "" HUP; exec "$@"' nohup)
		"${pre[@]}" "$MKSHMCON" connect "$name" -x "$side" "$@" <"$in" >"$d/out" 2>"$d/err" &
		echo $! >"$d/pid.tmp"
		mv "$d/pid.tmp" "$d/pid"
		wait $!
		echo $? >"$d/rc.tmp"
		mv "$d/rc.tmp" "$d/rc"
	) 3>&- &
	BG_PIDS+=($!)
	wait_end_started "$id"
}

# wait_end_started ID: until the end's pid file is written (at most 5 s).
wait_end_started() {
	local i
	for ((i = 0; i < 500; i++)); do
		[ -s "$ENDS/$1/pid" ] && return 0
		sleep 0.01
	done
	die "end $1 did not start"
}

end_pid() {
	cat "$ENDS/$1/pid"
}

end_out() {
	echo "$ENDS/$1/out"
}

end_err() {
	cat "$ENDS/$1/err"
}

# wait_end ID [SECONDS=15]: waits for end ID to exit; sets END_RC and
# END_ERR (its stderr).  Fails, showing its stderr, when it does not.
wait_end() {
	local id=$1 t=${2:-15} d=$ENDS/$1 deadline
	deadline=$(($(now_ms) + t * 1000))
	while [ ! -s "$d/rc" ]; do
		if [ "$(now_ms)" -ge "$deadline" ]; then
			echo "# end $id (pid $(cat "$d/pid")) still running after ${t}s; stderr:"
			sed 's/^/#   /' "$d/err"
			return 1
		fi
		sleep 0.02
	done
	END_RC=$(cat "$d/rc")
	END_ERR=$(cat "$d/err")
}

# end_running ID: true while end ID has not exited.
end_running() {
	[ ! -s "$ENDS/$1/rc" ]
}

# expect_end ID RC [STDERR]: end ID has exited with RC (and exactly STDERR).
expect_end() {
	wait_end "$1" || return 1
	if [ "$END_RC" -ne "$2" ]; then
		die "end $1 exited $END_RC, expected $2; stderr: $END_ERR"
		return 1
	fi
	if [ $# -ge 3 ] && [ "$END_ERR" != "$3" ]; then
		die "end $1 stderr: '$END_ERR'; expected: '$3'"
	fi
}

# hold_fifo PATH: creates a fifo and keeps a writer on it, so a reader
# never sees end of file; returns the writer's pid in HOLD_PID.
hold_fifo() {
	mkfifo "$1"
	sleep 300 >"$1" 3>&- &
	HOLD_PID=$!
	BG_PIDS+=($HOLD_PID)
}

# json_get PYEXPR: evaluates PYEXPR with d = the JSON document in $output.
json_get() {
	printf '%s' "$output" | python3 -c '
import json, sys
d = json.load(sys.stdin)
v = eval(sys.argv[1])
print("null" if v is None else v)' "$1"
}

# side_field NAME SIDE FIELD: one field of `status NAME -o json`.
side_field() {
	"$MKSHMCON" status "$1" -o json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
v = d[sys.argv[1]][sys.argv[2]]
print("null" if v is None else v)' "$2" "$3"
}

# wait_state NAME SIDE STATE [SECONDS=10]
wait_state() {
	local name=$1 side=$2 want=$3 t=${4:-10} got deadline
	deadline=$(($(now_ms) + t * 1000))
	while :; do
		got=$(side_field "$name" "$side" state 2>/dev/null) || got="(no status)"
		[ "$got" = "$want" ] && return 0
		if [ "$(now_ms)" -ge "$deadline" ]; then
			echo "# side $side of '$name' is '$got', not '$want', after ${t}s"
			"$MKSHMCON" status "$name" 2>&1 | sed 's/^/#   /'
			return 1
		fi
		sleep 0.05
	done
}

# wait_connected NAME: both sides connected.
wait_connected() {
	wait_state "$1" a connected && wait_state "$1" b connected
}

# wait_size FILE BYTES [SECONDS=10]: waits until FILE holds BYTES bytes.
wait_size() {
	local f=$1 want=$2 t=${3:-10} deadline
	deadline=$(($(now_ms) + t * 1000))
	while [ "$(stat -c %s "$f" 2>/dev/null || echo 0)" -lt "$want" ]; do
		[ "$(now_ms)" -lt "$deadline" ] || return 1
		sleep 0.02
	done
}

# random_file PATH BYTES
random_file() {
	head -c "$2" /dev/urandom >"$1"
}

# create_conn NAME [ARGS...]: a quiet create that must succeed.
create_conn() {
	local name=$1
	shift
	"$MKSHMCON" create -q "$name" "$@" || die "create $name $* failed"
}

# private_shm: true when commands can run in a mount namespace of their
# own with an empty /dev/shm (needs root or user namespaces).
private_shm() {
	unshare -m sh -c 'mount -t tmpfs tmpfs /dev/shm' >/dev/null 2>&1
}

# run_private EXPECTED_RC SCRIPT: runs the sh SCRIPT with $M set to the tool
# in a mount namespace with an empty /dev/shm; output as run_tool.
run_private() {
	local expected=$1
	run --separate-stderr timeout 30 unshare -m sh -c \
		'mount -t tmpfs tmpfs /dev/shm || exit 99; M=$1; eval "$2"' sh "$MKSHMCON" "$2"
	if [ "$status" -ne "$expected" ]; then
		show_run "(private /dev/shm) $2" "$expected"
		return 1
	fi
}
