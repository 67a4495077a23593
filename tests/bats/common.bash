# What every tool's bats helpers share (podman-style): a bounded run of a
# binary that checks its exit status and shows its output only on failure,
# and exact assertions on what it printed.

die() {
	echo "# $*" >&2
	return 1
}

# kill_bg: every process a test started in the background (BG_PIDS), killed
# and reaped; for teardown().
kill_bg() {
	local pid
	for pid in "${BG_PIDS[@]}"; do
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
}

# wait_listening NAME PID OUT ERR [N]: waits (10 s at most) until the
# server NAME, process PID, has printed N lines "listening ..." (default 1)
# to the file OUT; fails at once, with what it said to ERR, if it exits.
wait_listening() {
	local name=$1 pid=$2 out=$3 err=$4 n=${5:-1} i
	for i in $(seq 1 200); do
		[ "$(grep -c '^listening ' "$out" 2>/dev/null)" -ge "$n" ] && return 0
		kill -0 "$pid" 2>/dev/null || { die "$name died: $(cat "$err")"; return 1; }
		sleep 0.05
	done
	die "$name did not start: $(cat "$err")"
}

# unused_tcp_port: a TCP port nothing is bound to on any address, for a
# server a test starts next.  Taken below the kernel's ephemeral range
# (net.ipv4.ip_local_port_range), so that no connect() elsewhere -- another
# test's client, anything on the machine -- can be given it between this
# check and the server's bind; a port from bind(0) could be.
unused_tcp_port() {
	python3 -c '
import random, socket
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for i in range(500):
    p = random.randrange(10000, lo) if lo > 11000 and i < 499 else 0
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", p))
        print(s.getsockname()[1])
        break
    except OSError:
        pass
    finally:
        s.close()
'
}

# rm_mailboxes PREFIX: the shared-memory mailboxes whose names start with
# PREFIX, removed (a test's leftovers, for teardown()).
rm_mailboxes() {
	local f
	for f in /dev/shm/xprt-shmcm-"$1"*; do
		[ -e "$f" ] && rm -f "$f"
	done
	return 0
}

# run_limited SECONDS LABEL EXPECTED_RC PROG ARGS...: runs PROG ARGS under
# timeout; $output/$stderr/$status as bats sets them; stdin is the caller's.
run_limited() {
	local limit=$1 label=$2 expected=$3
	shift 3
	run --separate-stderr timeout "$limit" "$@"
	if [ "$status" -ne "$expected" ]; then
		show_run "$label ${*:2}" "$expected"
		return 1
	fi
}

# show_run COMMAND EXPECTED_RC: what the last run printed (and, where the
# test started a server logging to $SRV_ERR, what the server said).
show_run() {
	echo "# command: $1"
	echo "# rc: $status (expected $2)"
	echo "# stdout:"
	printf '%s\n' "$output" | sed 's/^/#   /'
	echo "# stderr:"
	printf '%s\n' "$stderr" | sed 's/^/#   /'
	if [ -n "${SRV_ERR:-}" ] && [ -e "$SRV_ERR" ]; then
		echo "# server stderr:"
		sed 's/^/#   /' "$SRV_ERR"
	fi
}

# expect_output STRING / expect_stderr STRING: exact match.
expect_output() {
	[ "$output" = "$1" ] || die "stdout was: '$output'; expected: '$1'"
}

expect_stderr() {
	[ "$stderr" = "$1" ] || die "stderr was: '$stderr'; expected: '$1'"
}

# expect_stderr_line STRING: stderr is exactly one line, STRING.
expect_stderr_line() {
	expect_stderr "$1" && [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
}

# expect_stderr_match REGEX: stderr is one line matching REGEX.
expect_stderr_match() {
	[ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ] || die "stderr is not one line: '$stderr'"
	[[ $stderr =~ $1 ]] || die "stderr '$stderr' does not match '$1'"
}
