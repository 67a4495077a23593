#!/usr/bin/env bats
#
# mkshmcon(8): every subcommand, option and error message, end to end.
# Tests marked "Regression" below were written against defects of the tool
# (they failed until commit be3948d fixed them); the comment above each
# says where the defect was and what it did.

bats_require_minimum_version 1.5.0

load helpers

HDR_KEYS='name slots mtu mru slot_size con_tmo_ms defq_max size created a b'
SIDE_KEYS='state pid flow cno peer_cno alive_count con_reqs sent_bytes sent_pkts recv_bytes recv_pkts recv_bad recv_stale defq_size defq_peak rx_backlog cma cma_msgs cma_bytes cma_failed attaches last_disconnect'

# The ends' reasons, as connect prints them after "connection 'NAME' ".
RESET_BY_PEER='reset by the peer (its process was stopped, its input or output failed, or it did not wait for our data)'

# What a receiving end (-d, or stdin /dev/null) left undone when its peer
# went before its data ended, as a regular expression: whether the peer
# had also read our (empty) end of data depends on timing.
NOT_ENDED_RE="before (the peer's data ended|the peer had all our input and before its data ended)"

# msg_re TEXT: TEXT as an extended regular expression matching it
# literally, except that each '#' stands for a number (the byte counts of
# connect's last line, which can vary with timing).
msg_re() {
	local r
	# shellcheck disable=SC2016
	r=$(printf '%s' "$1" | sed 's/[][\\.*^$(){}+?|]/\\&/g')
	printf '%s' "${r//#/[0-9]+}"
}

# line_matches STRING ERE: STRING is one line matching ERE (anchored at
# both ends).
line_matches() {
	[ "$(printf '%s\n' "$1" | wc -l)" -eq 1 ] || return 1
	[[ $1 =~ ^$2$ ]]
}

# expect_end_match ID RC ERE: end ID has exited with RC, and its stderr is
# one line matching ERE.
expect_end_match() {
	wait_end "$1" || return 1
	[ "$END_RC" -eq "$2" ] || die "end $1 exited $END_RC, expected $2; stderr: $END_ERR"
	line_matches "$END_ERR" "$3" || die "end $1 stderr: '$END_ERR'; does not match: '$3'"
}

# expect_end_line ID RC TEXT: expect_end_match with TEXT taken literally,
# '#' standing for a number.
expect_end_line() {
	expect_end_match "$1" "$2" "$(msg_re "$3")"
}

# ------------------------------------------------------------------ create

@test "create: prints the defaults; one 0600 object in /dev/shm" {
	run_tool 0 create "$CONN"
	expect_output "mkshmcon: created connection '$CONN': 128 slots of 16384 bytes each way, con_tmo 1000 ms, defq_max 0"
	expect_stderr ""
	local f=/dev/shm/xprt-shmcm-$CONN
	[ "$(stat -c %a "$f")" = 600 ]
	# a header, then two rings of 128 slots of at least 16 KiB
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['size']")" -eq "$(stat -c %s "$f")" ]
	[ "$(json_get "d['size'] >= 2 * 128 * d['slot_size'] and d['slot_size'] >= 16384")" = True ]
}

@test "create: -n -m -t -d take suffixes; long options; -q and -s are quiet" {
	run_tool 0 create "$CONN" -n 16 -m 4k -t 2s -d 10
	expect_output "mkshmcon: created connection '$CONN': 16 slots of 4096 bytes each way, con_tmo 2000 ms, defq_max 10"
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['slots'], d['mtu'], d['mru'], d['con_tmo_ms'], d['defq_max']")" = "(16, 4096, 4096, 2000, 10)" ]

	run_tool 0 create "$CONN" --slots 0x20 --mtu 1KiB --con-tmo 1.5s --defq-max 0
	expect_output "mkshmcon: re-created stale connection '$CONN': 32 slots of 1024 bytes each way, con_tmo 1500 ms, defq_max 0"
	run_tool 0 create "$CONN" --con_tmo 250ms -m 100 -n 2
	expect_output "mkshmcon: re-created stale connection '$CONN': 2 slots of 100 bytes each way, con_tmo 250 ms, defq_max 0"
	# slots are a whole number of 64-byte cache lines; the MTU stays as given
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['mtu'], d['slot_size'] % 64, d['slot_size'] >= 100")" = "(100, 0, True)" ]
	[ "$(json_get "d['size']")" -eq "$(stat -c %s "/dev/shm/xprt-shmcm-$CONN")" ]

	run_tool 0 create -q "$CONN"
	expect_output ""
	run_tool 0 create --silent "$CONN" -t 100ms -m 36 -n 64k
	expect_output ""
	expect_stderr ""
}

@test "create: out-of-range and junk values exit 2 with one line naming the value" {
	local -a cases=(
		"-n 1|slot count '1' too small (2 to 65536)"
		"-n 128k|slot count '128k' too large (2 to 65536)"
		"-n x|slot count 'x' invalid (2 to 65536)"
		"-n 16q|slot count '16q' invalid (2 to 65536)"
		"-m 35|MTU '35' too small (36 to 16M bytes)"
		"-m 17M|MTU '17M' too large (36 to 16M bytes)"
		"-m 1q|MTU '1q' invalid (36 to 16M bytes)"
		"-t 99ms|connection timeout '99ms' too small (100ms to 1h)"
		"-t 2h|connection timeout '2h' too large (100ms to 1h)"
		"-t zz|connection timeout 'zz' invalid (100ms to 1h)"
		"-t 5|connection timeout '5' too small (100ms to 1h)"
		"-d -1|deferred queue limit '-1' invalid (0 to 1000000)"
		"-d 1000001|deferred queue limit '1000001' too large (0 to 1000000)"
		"-d 1k|deferred queue limit '1k' invalid (0 to 1000000)"
	)
	local c
	for c in "${cases[@]}"; do
		# shellcheck disable=SC2086
		run_tool 2 create "$CONN" ${c%%|*}
		expect_output ""
		expect_stderr "mkshmcon create: ${c#*|}
Try 'mkshmcon create --help'."
	done
	# a slot count in range but not a power of two: the library's check
	run_tool 2 create "$CONN" -n 3
	expect_stderr "mkshmcon create: slot count 3 out of range: a power of two from 2 to 65536
Try 'mkshmcon create --help'."
	[ ! -e "/dev/shm/xprt-shmcm-$CONN" ]
}

@test "create: a mailbox over 4 GiB is refused" {
	run_tool 2 create "$CONN" -n 65536 -m 16M
	expect_stderr "mkshmcon create: mailbox too large: 65536 slots of 16777216 bytes in each direction, both together over 4 GiB
Try 'mkshmcon create --help'."
	[ ! -e "/dev/shm/xprt-shmcm-$CONN" ]
}

@test "create: missing name, extra argument, unknown option exit 2" {
	run_tool 2 create
	expect_stderr "mkshmcon create: connection name missing
Try 'mkshmcon create --help'."
	run_tool 2 create -n 4
	expect_stderr "mkshmcon create: connection name missing
Try 'mkshmcon create --help'."
	run_tool 2 create "$CONN" extra
	expect_stderr "mkshmcon create: unexpected argument 'extra'
Try 'mkshmcon create --help'."
	run_tool 2 create "$CONN" -Z
	expect_stderr "mkshmcon create: invalid option '-Z'
Try 'mkshmcon create --help'."
	run_tool 2 create "$CONN" --bogus
	expect_stderr "mkshmcon create: invalid option '--bogus'
Try 'mkshmcon create --help'."
	run_tool 2 create "$CONN" -n
	expect_stderr "mkshmcon create: option '-n' needs a value
Try 'mkshmcon create --help'."
	[ ! -e "/dev/shm/xprt-shmcm-$CONN" ]
}

@test "create: invalid names are refused" {
	local long
	long=$(printf 'a%.0s' $(seq 101))
	local n
	for n in a/b .x -x 'a b' 'x*'; do
		run_tool 2 create -- "$n"
		expect_stderr_line "mkshmcon: invalid connection name '$n': use letters, digits, '.', '_', '-'"
	done
	run_tool 2 create "$long"
	expect_stderr_line "mkshmcon: invalid connection name '$long': 1 to 100 characters"
	run_tool 2 create ""
	expect_stderr_line "mkshmcon: invalid connection name '': 1 to 100 characters"
	# 100 characters is the limit, and allowed
	long=$CONN_PREFIX$(printf 'z%.0s' $(seq $((100 - ${#CONN_PREFIX}))))
	[ ${#long} -eq 100 ]
	run_tool 0 create -q "$long"
	[ -e "/dev/shm/xprt-shmcm-$long" ]
	# letters, digits, '.', '_', '-' (not first)
	run_tool 0 create -q "${CONN}.A_9-z"
}

@test "create: shmcm/NAME (LINX's DB key) is accepted everywhere" {
	run_tool 0 create "shmcm/$CONN"
	expect_output "mkshmcon: created connection '$CONN': 128 slots of 16384 bytes each way, con_tmo 1000 ms, defq_max 0"
	[ -e "/dev/shm/xprt-shmcm-$CONN" ]
	run_tool 0 status "shmcm/$CONN" -o json
	[ "$(json_get "d['name']")" = "$CONN" ]
	run_tool 1 connect "shmcm/$CONN" -x a -w 200ms </dev/null
	expect_stderr_line "mkshmcon: connection '$CONN': no peer on side b within the wait timeout"
	run_tool 0 rm "shmcm/$CONN"
	[ ! -e "/dev/shm/xprt-shmcm-$CONN" ]
}

@test "create: an idle connection is re-created with the new parameters" {
	create_conn "$CONN" -n 8
	# use it once so that there is state to wipe
	run_tool 1 connect "$CONN" -x a -w 200ms </dev/null
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['a']['state'], d['a']['attaches'], d['a']['con_reqs']")" = "('detached', 1, 1)" ]

	run_tool 0 create "$CONN" -n 4 -m 512
	expect_output "mkshmcon: re-created stale connection '$CONN': 4 slots of 512 bytes each way, con_tmo 1000 ms, defq_max 0"
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['slots'], d['mtu'], d['a']['state'], d['a']['attaches'], d['a']['cno']")" = "(4, 512, 'free', 0, 0)" ]
}

@test "create, connect: a mailbox another user made or opened to others is not used" {
	local f=/dev/shm/xprt-shmcm-$CONN
	# the name taken first by another user, open to all: what we would
	# write there, that user could read
	python3 -c '
import os, sys
fd = os.open(sys.argv[1], os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
os.fchown(fd, 65534, 65534)
os.fchmod(fd, 0o666)' "$f" 2>/dev/null || skip "needs root to make an object of another user"
	local why="its mailbox belongs to uid 65534 with mode 0666, not to us alone: not used (its owner or root can remove it: mkshmcon rm $CONN)"
	run_tool 1 create "$CONN"
	expect_stderr_line "mkshmcon: connection '$CONN': $why"
	[ "$(stat -c '%u %a %s' "$f")" = "65534 666 0" ]
	run_tool 1 connect "$CONN" -x a </dev/null
	expect_stderr_line "mkshmcon: connection '$CONN': $why"
	# ours but open to others: not used either; ours again once it is not
	chown 0:0 "$f"
	run_tool 1 create "$CONN"
	expect_stderr_line "mkshmcon: connection '$CONN': its mailbox belongs to uid 0 with mode 0666, not to us alone: not used (its owner or root can remove it: mkshmcon rm $CONN)"
	run_tool 0 rm "$CONN"
	[ ! -e "$f" ]
	run_tool 0 create -q "$CONN"
	[ "$(stat -c '%u %a' "$f")" = "0 600" ]
	# and another user cannot open ours: told with owner and mode
	command -v setpriv >/dev/null || skip "setpriv is not installed (util-linux)"
	setpriv --reuid=65534 --regid=65534 --clear-groups "$MKSHMCON" -V >/dev/null 2>&1 ||
		skip "uid 65534 cannot run $MKSHMCON (a build under a private directory)"
	run --separate-stderr setpriv --reuid=65534 --regid=65534 --clear-groups \
		"$MKSHMCON" connect "$CONN" -x b </dev/null
	[ "$status" -eq 1 ] || die "exit $status: $stderr"
	[ "$stderr" = "mkshmcon: connection '$CONN': its mailbox belongs to uid 0 with mode 0600: not ours to open (its owner or root can remove it: mkshmcon rm $CONN)" ] ||
		die "$stderr"
}

@test "create: a /dev/shm too small for the mailbox is told at create, not by SIGBUS later" {
	private_shm || skip "needs a mount namespace (unshare -m) for a small /dev/shm"
	run --separate-stderr timeout 30 unshare -m sh -c \
		'mount -t tmpfs -o size=8m tmpfs /dev/shm || exit 99; "$1" create big -n 1024 -m 64k; echo "rc=$?"; ls /dev/shm' \
		sh "$MKSHMCON"
	[ "$status" -eq 0 ] || die "status $status: $stderr"
	expect_output "rc=1"
	expect_stderr "mkshmcon: connection 'big': cannot reserve 134352896 bytes for the mailbox in /dev/shm: No space left on device"
}

@test "create and -h to a full disk: exit 1 with one line (the mailbox is made all the same)" {
	run --separate-stderr bash -c '"$0" create "$1" >/dev/full' "$MKSHMCON" "$CONN"
	[ "$status" -eq 1 ] && [ "$stderr" = "mkshmcon: standard output: No space left on device" ] ||
		die "exit $status: $stderr"
	run_tool 0 status "$CONN"
	run --separate-stderr bash -c '"$0" -h >/dev/full' "$MKSHMCON"
	[ "$status" -eq 1 ] && [ "$stderr" = "mkshmcon: standard output: No space left on device" ] ||
		die "exit $status: $stderr"
}

@test "create: refused while a side is in use by a live process" {
	create_conn "$CONN"
	# a's input never ends, so the pair stays connected
	hold_fifo "$BATS_TEST_TMPDIR/fa"
	start_end A "$CONN" a "$BATS_TEST_TMPDIR/fa"
	wait_state "$CONN" a connecting
	run_tool 1 create "$CONN"
	expect_output ""
	expect_stderr_line "mkshmcon: connection '$CONN' exists and side a is in use by pid $(end_pid A)"

	start_end B "$CONN" b /dev/null
	wait_connected "$CONN"
	run_tool 1 create "$CONN" -n 4
	expect_stderr_line "mkshmcon: connection '$CONN' exists and side a is in use by pid $(end_pid A)"
	# untouched
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['slots'], d['a']['state'], d['b']['state']")" = "(128, 'connected', 'connected')" ]
}

# ------------------------------------------------------------ connect: data

@test "connect: a tar of a directory tree goes from a to b byte-exact (b first)" {
	local t=$BATS_TEST_TMPDIR
	mkdir -p "$t/tree/d1/d2/d3" "$t/tree/empty" "$t/tree/sp ace"
	: >"$t/tree/zero"
	random_file "$t/tree/one" 1
	random_file "$t/tree/d1/page" 4096
	random_file "$t/tree/d1/frag" 16352
	random_file "$t/tree/d1/frag1" 16353
	random_file "$t/tree/d1/d2/mid" 100000
	random_file "$t/tree/d1/d2/d3/big" 3000000
	random_file "$t/tree/sp ace/f" 777
	ln -s d1/page "$t/tree/link"
	create_conn "$CONN"

	start_end B "$CONN" b /dev/null -d
	wait_state "$CONN" b connecting
	set +e
	tar -C "$t/tree" -cf - . | tee "$t/in.tar" | timeout 30 "$MKSHMCON" connect "$CONN" -x a >"$t/a.out" 2>"$t/a.err"
	local -a rcs=("${PIPESTATUS[@]}")
	set -e
	[ "${rcs[*]}" = "0 0 0" ] || die "pipeline exit statuses: ${rcs[*]}; a's stderr: $(cat "$t/a.err")"
	[ ! -s "$t/a.out" ]
	[ ! -s "$t/a.err" ]
	expect_end B 0 ""
	cmp "$t/in.tar" "$(end_out B)"
	mkdir "$t/untar"
	tar -C "$t/untar" -xf "$(end_out B)"
	diff -r --no-dereference "$t/tree" "$t/untar"
}

@test "connect: 50 MB through, a started first, then b" {
	local in=$BATS_TEST_TMPDIR/in
	random_file "$in" $((50 * 1024 * 1024))
	create_conn "$CONN"
	start_end A "$CONN" a "$in"
	wait_state "$CONN" a connecting
	start_end B "$CONN" b /dev/null -d
	expect_end A 0 ""
	expect_end B 0 ""
	cmp "$in" "$(end_out B)"
	[ ! -s "$(end_out A)" ]
}

@test "connect: data flows b -> a to an end whose stdin is /dev/null" {
	local in=$BATS_TEST_TMPDIR/in
	random_file "$in" 1000000
	create_conn "$CONN"
	# a has /dev/null on stdin: its own data ends at once (a half-close),
	# and b's data still reaches it whole
	start_end A "$CONN" a /dev/null
	wait_state "$CONN" a connecting
	start_end B "$CONN" b "$in"
	expect_end B 0 ""
	expect_end A 0 ""
	cmp "$in" "$(end_out A)"
	[ ! -s "$(end_out B)" ]
}

@test "connect: one end's data ends; the other direction keeps flowing after it" {
	local t=$BATS_TEST_TMPDIR
	random_file "$t/xa" 3000000
	random_file "$t/xb" 2000000
	mkfifo "$t/fa" "$t/fb"
	create_conn "$CONN"
	start_end A "$CONN" a "$t/fa" -v
	start_end B "$CONN" b "$t/fb"
	# a's input ends right after its data; b starts sending only once a
	# logged that b has read all of it (its CON_FIN included), so all of
	# b's data follows a's end of data
	cat "$t/xa" >"$t/fa" 3>&- &
	BG_PIDS+=($!)
	(
		for ((i = 0; i < 1000; i++)); do
			grep -q "the peer has all our data" "$ENDS/A/err" && break
			sleep 0.02
		done
		cat "$t/xb"
	) >"$t/fb" 3>&- &
	BG_PIDS+=($!)
	expect_end A 0 "mkshmcon: side a of '$CONN' attached, connecting
mkshmcon: connected
mkshmcon: the peer has all our data (3000000 bytes)"
	expect_end B 0 ""
	cmp "$t/xa" "$(end_out B)"
	cmp "$t/xb" "$(end_out A)"
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['a']['last_disconnect'], d['b']['last_disconnect']")" = \
		"('closed after both ends finished', 'closed after both ends finished')" ]
}

@test "connect: an empty input closes the connection; the peer exits 0" {
	: >"$BATS_TEST_TMPDIR/empty"
	create_conn "$CONN"
	start_end B "$CONN" b /dev/null -d
	start_end A "$CONN" a "$BATS_TEST_TMPDIR/empty"
	expect_end A 0 ""
	expect_end B 0 ""
	[ ! -s "$(end_out B)" ]
	[ ! -s "$(end_out A)" ]
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['a']['last_disconnect'], d['b']['last_disconnect']")" = \
		"('closed after both ends finished', 'closed after both ends finished')" ]
}

@test "connect -d: receive-only even with data on stdin" {
	local in=$BATS_TEST_TMPDIR/in
	random_file "$in" 50000
	create_conn "$CONN"
	start_end B "$CONN" b "$in" -d
	start_end A "$CONN" a "$in"
	expect_end A 0 ""
	expect_end B 0 ""
	cmp "$in" "$(end_out B)"
	# b never sent its stdin
	[ ! -s "$(end_out A)" ]
}

# records: 4-byte big-endian length, then the bytes
make_records() {
	python3 - "$1" <<'EOF'
import os, struct, sys
recs = [b"hello", b"", os.urandom(1000), b"x" * 223, b"y" * 224, b"z" * 225,
        b"", os.urandom(70000), b"\0\0\0\5", os.urandom(3)]
with open(sys.argv[1], "wb") as f:
    for r in recs:
        f.write(struct.pack(">I", len(r)) + r)
EOF
}

check_records() {
	python3 - "$1" "$2" <<'EOF'
import struct, sys
def parse(p):
    b, out, i = open(p, "rb").read(), [], 0
    while i < len(b):
        n = struct.unpack(">I", b[i:i + 4])[0]
        out.append(b[i + 4:i + 4 + n])
        i += 4 + n
    if i != len(b):
        sys.exit("%s: trailing %d bytes" % (p, len(b) - i + 4 + n))
    return out
want, got = parse(sys.argv[1]), parse(sys.argv[2])
if want != got:
    sys.exit("records differ: want lengths %s, got %s" %
             ([len(r) for r in want], [len(r) for r in got]))
EOF
}

@test "connect -M: records keep their boundaries, empty and fragmented ones too" {
	local t=$BATS_TEST_TMPDIR
	make_records "$t/recs"
	# MTU 256: 224 bytes of data per fragment, 70000 bytes take 313
	create_conn "$CONN" -m 256
	start_end B "$CONN" b /dev/null -d -M
	start_end A "$CONN" a "$t/recs" -M
	expect_end A 0 ""
	expect_end B 0 ""
	check_records "$t/recs" "$(end_out B)"
	cmp "$t/recs" "$(end_out B)"

	# and the other way
	run_tool 0 create -q "$CONN" -m 256
	start_end A2 "$CONN" a /dev/null -M
	start_end B2 "$CONN" b "$t/recs" --message
	expect_end B2 0 ""
	expect_end A2 0 ""
	cmp "$t/recs" "$(end_out A2)"
}

@test "connect -M: input ending inside a record fails after the whole records" {
	create_conn "$CONN"
	printf '\0\0\0\005abcde\0\0\0\011xy' >"$BATS_TEST_TMPDIR/short"
	start_end B "$CONN" b /dev/null -d -M
	start_end A "$CONN" a "$BATS_TEST_TMPDIR/short" -M
	expect_end A 1 "mkshmcon: connection '$CONN': input ends inside a record (6 bytes left over after 9 bytes of whole records)"
	# the whole record before it was sent; a's data did not end cleanly,
	# so b exits 1 too
	expect_end_match B 1 "$(msg_re "mkshmcon: connection '$CONN' $RESET_BY_PEER") $NOT_ENDED_RE \(0 bytes sent, 5 received\)"
	cmp <(printf '\0\0\0\005abcde') "$(end_out B)"
}

@test "connect -M: a record over the 64 MiB message limit fails" {
	create_conn "$CONN"
	printf '\005\0\0\005ab' >"$BATS_TEST_TMPDIR/huge"
	start_end B "$CONN" b /dev/null -d -M
	start_end A "$CONN" a "$BATS_TEST_TMPDIR/huge" -M
	expect_end A 1 "mkshmcon: connection '$CONN': input record of 83886085 bytes exceeds the 67108864 byte message limit (after 0 bytes of whole records)"
	expect_end_match B 1 "$(msg_re "mkshmcon: connection '$CONN' $RESET_BY_PEER") $NOT_ENDED_RE \(0 bytes sent, 0 received\)"
	[ ! -s "$(end_out B)" ]
}

# ------------------------------------------- connect: half-close and exit status
#
# End of input is a half-close (CON_FIN, like shutdown(SHUT_WR)): the peer
# gets everything before it and its own data keeps flowing; the connection
# closes once both directions ended.  An end exits 0 only when all its input
# reached the peer and all the peer's data reached its stdout; otherwise 1
# (or 128+signal, or 141 for a closed stdout) with one line saying why.

# start_end_to ID NAME SIDE STDIN FILTER [CONNECT-ARGS...]: start_end with
# the end's stdout piped into the sh command FILTER, whose own stdout lands
# in $ENDS/ID/out; $ENDS/ID/pid and rc are the end's, not the filter's.
start_end_to() {
	local id=$1 name=$2 side=$3 in=$4 filter=$5 d=$ENDS/$1
	shift 5
	mkdir -p "$d"
	(
		set +e
		(
			echo "$BASHPID" >"$d/pid.tmp"
			mv "$d/pid.tmp" "$d/pid"
			exec "$MKSHMCON" connect "$name" -x "$side" "$@" <"$in" 2>"$d/err"
		) | sh -c "$filter" >"$d/out"
		echo "${PIPESTATUS[0]}" >"$d/rc.tmp"
		mv "$d/rc.tmp" "$d/rc"
	) 3>&- &
	BG_PIDS+=($!)
	wait_end_started "$id"
}

@test "connect: both directions at once, different sizes; both exit 0" {
	local t=$BATS_TEST_TMPDIR
	random_file "$t/xa" 3000000
	random_file "$t/xb" 2000000
	create_conn "$CONN"
	start_end A "$CONN" a "$t/xa"
	start_end B "$CONN" b "$t/xb"
	expect_end A 0 ""
	expect_end B 0 ""
	cmp "$t/xa" "$(end_out B)"
	cmp "$t/xb" "$(end_out A)"
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['a']['last_disconnect'], d['b']['last_disconnect']")" = \
		"('closed after both ends finished', 'closed after both ends finished')" ]
	[ "$(json_get "d['a']['sent_bytes'] > 3000000, d['b']['sent_bytes'] > 2000000, d['a']['recv_bad'], d['b']['recv_bad']")" = \
		"(True, True, 0, 0)" ]
}

@test "connect: request/response: a short input gets all of a long reply" {
	local t=$BATS_TEST_TMPDIR
	printf hello >"$t/req"
	random_file "$t/resp" $((4 * 1024 * 1024))
	create_conn "$CONN"
	# a's input ends after 5 bytes; b's 4 MB must still all reach a (a
	# close at a's end of input would cut the reply short)
	start_end A "$CONN" a "$t/req"
	start_end B "$CONN" b "$t/resp"
	expect_end A 0 ""
	expect_end B 0 ""
	cmp "$t/resp" "$(end_out A)"
	[ "$(cat "$(end_out B)")" = hello ]

	# a true request/response: b starts its reply only once it has read
	# the request, long after a's end of data
	mkfifo "$t/fb"
	start_end A2 "$CONN" a "$t/req"
	start_end B2 "$CONN" b "$t/fb"
	(wait_size "$(end_out B2)" 5 && cat "$t/resp") >"$t/fb" 3>&- &
	BG_PIDS+=($!)
	expect_end A2 0 ""
	expect_end B2 0 ""
	cmp "$t/resp" "$(end_out A2)"
	[ "$(cat "$(end_out B2)")" = hello ]
}

@test "connect -M: request/response in records: a one-record input gets all of a long reply" {
	local t=$BATS_TEST_TMPDIR
	printf '\0\0\0\005hello' >"$t/req"
	python3 - "$t/resp" <<'EOF'
import os, random, struct, sys
rnd = random.Random(5)
with open(sys.argv[1], "wb") as f:
    total = 0
    while total < 4 * 1024 * 1024:
        n = rnd.choice([0, 1, 16352, 16353, rnd.randrange(1, 200000)])
        f.write(struct.pack(">I", n) + os.urandom(n))
        total += 4 + n
EOF
	create_conn "$CONN"
	start_end A "$CONN" a "$t/req" -M
	start_end B "$CONN" b "$t/resp" -M
	expect_end A 0 ""
	expect_end B 0 ""
	check_records "$t/resp" "$(end_out A)"
	cmp "$t/resp" "$(end_out A)"
	cmp "$t/req" "$(end_out B)"
}

@test "connect: an end with stdin /dev/null (not -d) stays connected and receives everything" {
	local t=$BATS_TEST_TMPDIR
	random_file "$t/in" 2000000
	create_conn "$CONN"
	# b's data comes only when $t/go appears
	mkfifo "$t/fb"
	(
		for ((i = 0; i < 1000; i++)); do
			[ -e "$t/go" ] && break
			sleep 0.02
		done
		cat "$t/in"
	) >"$t/fb" 3>&- &
	BG_PIDS+=($!)
	start_end A "$CONN" a /dev/null -v
	start_end B "$CONN" b "$t/fb"
	# a's end of data (nothing) has reached b ...
	local i
	for ((i = 0; i < 500; i++)); do
		grep -q "the peer has all our data (0 bytes)" "$ENDS/A/err" && break
		sleep 0.02
	done
	grep -q "the peer has all our data (0 bytes)" "$ENDS/A/err" || die "a: $(end_err A)"
	# ... and a still waits for b's
	sleep 0.3
	end_running A
	[ "$(side_field "$CONN" a state)" = connected ]
	touch "$t/go"
	expect_end A 0 "mkshmcon: side a of '$CONN' attached, connecting
mkshmcon: connected
mkshmcon: the peer has all our data (0 bytes)"
	expect_end B 0 ""
	cmp "$t/in" "$(end_out A)"
	[ ! -s "$(end_out B)" ]
}

@test "connect: a peer killed mid-transfer: the survivor exits 1 with an exact prefix" {
	local t=$BATS_TEST_TMPDIR
	random_file "$t/in" 8000000
	create_conn "$CONN"
	# b's reader reads nothing until $GO appears: b's stdout pipe and
	# the mailbox fill, and a waits for room with most of its input left
	export GO=$t/go
	# shellcheck disable=SC2016
	start_end_to B "$CONN" b /dev/null \
		'for i in $(seq 300); do [ -e "$GO" ] && break; sleep 0.05; done; cat' -d
	start_end A "$CONN" a "$t/in"
	wait_connected "$CONN"
	sleep 0.3
	end_running A
	kill -KILL "$(end_pid A)"
	expect_end A 137
	touch "$GO"
	expect_end_match B 1 "$(msg_re "mkshmcon: connection '$CONN' peer process died") $NOT_ENDED_RE $(msg_re "(0 bytes sent, # received)")"
	# what b got is exactly what it says, and a prefix of a's input
	local n
	n=$(stat -c %s "$(end_out B)")
	[ "$n" -gt 0 ] && [ "$n" -lt 8000000 ] || die "b got $n bytes"
	[[ $END_ERR == *"(0 bytes sent, $n received)" ]] || die "b got $n bytes: $END_ERR"
	cmp -n "$n" "$t/in" "$(end_out B)"
	[ "$(side_field "$CONN" b last_disconnect)" = "peer process died" ]
}

@test "connect --send-only: exits 0 once the peer has all our input; the peer then exits 1" {
	local t=$BATS_TEST_TMPDIR
	random_file "$t/in" 1000000
	create_conn "$CONN"
	# b's input never ends: a does not wait for it
	hold_fifo "$t/fb"
	start_end B "$CONN" b "$t/fb"
	start_end A "$CONN" a "$t/in" --send-only
	expect_end A 0 ""
	# "the peer has all our input": on b's stdout by the time a exits
	[ "$(stat -c %s "$(end_out B)")" -eq 1000000 ]
	cmp "$t/in" "$(end_out B)"
	[ ! -s "$(end_out A)" ]
	# b's own data had not ended when a went
	expect_end B 1 "mkshmcon: connection '$CONN' $RESET_BY_PEER before our input ended (0 bytes sent, 1000000 received)"
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['a']['last_disconnect'], d['b']['last_disconnect']")" = \
		"('closed locally', 'peer closed the connection')" ]
}

@test "connect --linger: gives up on the peer's data after the linger time" {
	local t=$BATS_TEST_TMPDIR
	random_file "$t/in" 100000
	create_conn "$CONN"
	hold_fifo "$t/fb"
	start_end B "$CONN" b "$t/fb"
	wait_state "$CONN" b connecting
	local t0 dt
	t0=$(now_ms)
	run_tool 1 connect "$CONN" -x a --linger 300ms <"$t/in"
	dt=$(($(now_ms) - t0))
	expect_output ""
	expect_stderr_line "mkshmcon: connection '$CONN' closed: the linger time ran out before the peer's data ended (100000 bytes sent, 0 received)"
	[ "$dt" -ge 300 ] && [ "$dt" -lt 5000 ] || die "took ${dt} ms"
	expect_end B 1 "mkshmcon: connection '$CONN' $RESET_BY_PEER before our input ended (0 bytes sent, 100000 received)"
	cmp "$t/in" "$(end_out B)"

	# the peer's data ends within the linger time: 0
	random_file "$t/in2" 300000
	start_end B2 "$CONN" b "$t/in2"
	start_end A2 "$CONN" a "$t/in" -l 10s
	expect_end A2 0 ""
	expect_end B2 0 ""
	cmp "$t/in" "$(end_out B2)"
	cmp "$t/in2" "$(end_out A2)"
}

@test "connect: -d with --send-only, --linger with --send-only, a junk linger time exit 2" {
	create_conn "$CONN"
	local try="Try 'mkshmcon connect --help'."
	local a
	for a in "-d --send-only" "--send-only -d" "--recv-only --send-only" "--send-only --no-input"; do
		# shellcheck disable=SC2086
		run_tool 2 connect "$CONN" -x a $a </dev/null
		expect_output ""
		expect_stderr "mkshmcon connect: -d (--recv-only) and --send-only exclude each other
$try"
	done
	for a in "--linger 1s --send-only" "--send-only -l 0"; do
		# shellcheck disable=SC2086
		run_tool 2 connect "$CONN" -x a $a </dev/null
		expect_stderr "mkshmcon connect: --linger has no use with --send-only
$try"
	done
	run_tool 2 connect "$CONN" -x a --linger junk </dev/null
	expect_stderr "mkshmcon connect: linger time 'junk' invalid
$try"
	run_tool 2 connect "$CONN" -x a -l -1 </dev/null
	expect_stderr "mkshmcon connect: linger time '-1' invalid
$try"
	run_tool 2 connect "$CONN" -x a -l
	expect_stderr "mkshmcon connect: option '-l' needs a value
$try"
	# nothing of this attached
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['a']['attaches'], d['b']['attaches']")" = "(0, 0)" ]
}

@test "connect: stdout closed while the peer sends: 141 here, 1 for the sender" {
	local t=$BATS_TEST_TMPDIR
	random_file "$t/in" 8000000
	create_conn "$CONN"
	# neither input ends: a's is 8 MB and then nothing, b's nothing
	hold_fifo "$t/fb"
	start_end_to B "$CONN" b "$t/fb" 'head -c 100'
	hold_fifo "$t/fa"
	(cat "$t/in" >"$t/fa") 3>&- &
	BG_PIDS+=($!)
	start_end A "$CONN" a "$t/fa"
	expect_end_line B 141 "mkshmcon: connection '$CONN': writing to stdout: Broken pipe; reset before our input ended and before the peer's data ended (0 bytes sent, # received)"
	expect_end_line A 1 "mkshmcon: connection '$CONN' $RESET_BY_PEER before our input ended and before the peer's data ended (# bytes sent, 0 received)"
	cmp -n 100 "$t/in" "$(end_out B)"
	[ "$(stat -c %s "$(end_out B)")" -eq 100 ]
}

# ---------------------------------------------------------- connect: errors

@test "connect: unknown connection exits 1, an invalid name 2" {
	run_tool 1 connect "$CONN" -x a </dev/null
	expect_output ""
	expect_stderr_line "mkshmcon: no such connection '$CONN'"
	run_tool 2 connect a/b -x b </dev/null
	expect_stderr_line "mkshmcon: invalid connection name 'a/b': use letters, digits, '.', '_', '-'"
}

@test "connect: usage errors exit 2" {
	create_conn "$CONN"
	local try="Try 'mkshmcon connect --help'."
	run_tool 2 connect "$CONN" -x c
	expect_stderr "mkshmcon connect: side 'c' must be a or b
$try"
	run_tool 2 connect "$CONN"
	expect_stderr "mkshmcon connect: which side? -x a or -x b
$try"
	run_tool 2 connect -x a
	expect_stderr "mkshmcon connect: connection name missing
$try"
	run_tool 2 connect "$CONN" -x a extra
	expect_stderr "mkshmcon connect: unexpected argument 'extra'
$try"
	run_tool 2 connect "$CONN" -x a --flow fast
	expect_stderr "mkshmcon connect: flow 'fast' must be wait or defer
$try"
	run_tool 2 connect "$CONN" -x a -w 0
	expect_stderr "mkshmcon connect: wait timeout '0' too small
$try"
	run_tool 2 connect "$CONN" -x a -w soon
	expect_stderr "mkshmcon connect: wait timeout 'soon' invalid
$try"
	run_tool 2 connect "$CONN" -x a -Z
	expect_stderr "mkshmcon connect: invalid option '-Z'
$try"
	# -x is case-insensitive; nothing of this attached
	run_tool 1 connect "$CONN" -x B -w 100ms </dev/null
	expect_stderr_line "mkshmcon: connection '$CONN': no peer on side a within the wait timeout"
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['a']['attaches'], d['b']['attaches']")" = "(0, 1)" ]
}

@test "connect -w: no peer within the timeout exits 1" {
	create_conn "$CONN"
	local t0 dt
	t0=$(now_ms)
	run_tool 1 connect "$CONN" -x a -w 1 </dev/null
	dt=$(($(now_ms) - t0))
	expect_output ""
	expect_stderr_line "mkshmcon: connection '$CONN': no peer on side b within the wait timeout"
	[ "$dt" -ge 900 ] && [ "$dt" -lt 3000 ] || die "took ${dt} ms"
	run_tool 1 connect "$CONN" -x b --wait 300ms </dev/null
	expect_stderr_line "mkshmcon: connection '$CONN': no peer on side a within the wait timeout"
	# the side is given back
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['a']['state'], d['a']['pid'], d['b']['state']")" = "('detached', None, 'detached')" ]
}

# Regression: lib/shmcm/shmcm.c, shmcm_open() jumped to out_free when
# mbox_claim() failed, before c->me was set, and conn_free() then did
# atomic_store(&c->me->state, ...) through the NULL c->me: a second process
# claiming an occupied side died with SIGSEGV (rc 139) and never printed
# mbox_claim's "in use by pid" line.
@test "connect: a second process on an occupied side exits 1 'in use by pid'" {
	create_conn "$CONN"
	start_end A "$CONN" a /dev/null
	wait_state "$CONN" a connecting
	run_tool 1 connect "$CONN" -x a </dev/null
	expect_output ""
	expect_stderr_line "mkshmcon: side a of connection '$CONN' is in use by pid $(end_pid A)"
	# the owner is untouched
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['a']['state'], d['a']['pid'], d['a']['attaches']")" = "('connecting', $(end_pid A), 1)" ]
}

@test "connect: the first process keeps working after a rival claims its side" {
	local t=$BATS_TEST_TMPDIR
	random_file "$t/p1" 1500000
	random_file "$t/p2" 1500000
	cat "$t/p1" "$t/p2" >"$t/all"
	create_conn "$CONN"
	hold_fifo "$t/fa"
	start_end A "$CONN" a "$t/fa"
	start_end B "$CONN" b /dev/null -d
	wait_connected "$CONN"
	cat "$t/p1" >"$t/fa"
	wait_size "$(end_out B)" 1500000
	# rivals on both sides fail and leave the pair alone
	run_tool 1 connect "$CONN" -x a </dev/null
	expect_stderr_line "mkshmcon: side a of connection '$CONN' is in use by pid $(end_pid A)"
	run_tool 1 connect "$CONN" -x b -M </dev/null
	expect_stderr_line "mkshmcon: side b of connection '$CONN' is in use by pid $(end_pid B)"
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['a']['state'], d['a']['pid'], d['b']['state'], d['b']['pid'], d['a']['attaches']")" = \
		"('connected', $(end_pid A), 'connected', $(end_pid B), 1)" ]
	cat "$t/p2" >"$t/fa"
	kill "$HOLD_PID"
	expect_end A 0 ""
	expect_end B 0 ""
	cmp "$t/all" "$(end_out B)"
}

@test "connect: a corrupted header (bad magic) is a one-line error" {
	create_conn "$CONN"
	python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.write(b"JUNK")' "/dev/shm/xprt-shmcm-$CONN"
	local msg="mkshmcon: connection '$CONN': not an xprt mailbox (bad magic 0x4b4e554a)"
	run_tool 1 status "$CONN"
	expect_output ""
	expect_stderr_line "$msg"
	run_tool 1 connect "$CONN" -x a </dev/null
	expect_stderr_line "$msg"
	# listed as invalid, so it can be found and removed
	run_tool 0 list -o json
	[ "$(json_get "[e for e in d if e['name'] == '$CONN'][0]")" = \
		"{'name': '$CONN', 'slots': None, 'mtu': None, 'a': 'invalid', 'b': 'invalid', 'pid_a': None, 'pid_b': None}" ]
	# without a magic, create takes it for a half-made mailbox and redoes it
	run_tool 0 create "$CONN"
	expect_output "mkshmcon: re-created stale connection '$CONN': 128 slots of 16384 bytes each way, con_tmo 1000 ms, defq_max 0"
	run_tool 0 status "$CONN"
}

@test "connect: a mailbox of another version is refused, naming the version" {
	create_conn "$CONN"
	local f=/dev/shm/xprt-shmcm-$CONN hsz
	hsz=$(python3 -c 'import struct, sys; print(struct.unpack_from("<H", open(sys.argv[1], "rb").read(8), 6)[0])' "$f")
	python3 -c 'import struct, sys; f = open(sys.argv[1], "r+b"); f.seek(4); f.write(struct.pack("<H", 99))' "$f"
	local msg="mkshmcon: connection '$CONN': mailbox version 99 (header $hsz bytes), this mkshmcon speaks version 1"
	run_tool 1 status "$CONN"
	expect_stderr_line "$msg"
	run_tool 1 connect "$CONN" -x b </dev/null
	expect_stderr_line "$msg"
	run_tool 1 create "$CONN"
	expect_stderr_line "$msg; remove it with 'mkshmcon rm $CONN'"
	run_tool 0 rm "$CONN"
	[ ! -e "$f" ]
}

@test "connect: a truncated mailbox is refused" {
	create_conn "$CONN"
	local f=/dev/shm/xprt-shmcm-$CONN
	truncate -s 100 "$f"
	run_tool 1 status "$CONN"
	expect_stderr_line "mkshmcon: connection '$CONN': corrupted mailbox (100 bytes, too small)"
	run_tool 1 connect "$CONN" -x a </dev/null
	expect_stderr_line "mkshmcon: connection '$CONN': corrupted mailbox (100 bytes, too small)"
	# a whole header, but a size that does not match it
	truncate -s 5000 "$f"
	run_tool 1 status "$CONN"
	expect_stderr_line "mkshmcon: connection '$CONN': corrupted header: layout does not match its size"
	run_tool 1 connect "$CONN" -x b </dev/null
	expect_stderr_line "mkshmcon: connection '$CONN': corrupted header: layout does not match its size"
	run_tool 0 rm "$CONN"
}

# Regression: lib/xprt/mbox.c, mbox_unlink() mapped the object with
# map_existing(), which fails for any object smaller than the header, before
# looking at `force`: neither rm nor rm -f could remove a truncated mailbox,
# though list shows it as invalid "so the user can see and remove it".
@test "rm: removes a mailbox truncated below its header" {
	create_conn "$CONN"
	truncate -s 100 "/dev/shm/xprt-shmcm-$CONN"
	run_tool 0 rm "$CONN"
	expect_stderr ""
	[ ! -e "/dev/shm/xprt-shmcm-$CONN" ]
	create_conn "$CONN"
	truncate -s 0 "/dev/shm/xprt-shmcm-$CONN"
	run_tool 0 rm -f "$CONN"
	[ ! -e "/dev/shm/xprt-shmcm-$CONN" ]
}

# Regression: lib/xprt/mbox.c, mbox_create() means to re-create a mailbox
# "whose creator died before writing the magic", but map_existing() failed
# first for an object smaller than the header -- e.g. the 0-byte object of a
# creator killed between shm_open(O_CREAT) and ftruncate() -- so create
# exited 1 with "corrupted mailbox (0 bytes, too small)".
@test "create: re-creates an empty object left by a dead creator" {
	: >"/dev/shm/xprt-shmcm-$CONN"
	chmod 600 "/dev/shm/xprt-shmcm-$CONN"
	run_tool 0 create "$CONN"
	expect_output "mkshmcon: re-created stale connection '$CONN': 128 slots of 16384 bytes each way, con_tmo 1000 ms, defq_max 0"
	run_tool 0 status "$CONN"
	# and one truncated within its header
	truncate -s 100 "/dev/shm/xprt-shmcm-$CONN"
	run_tool 0 create -q "$CONN" -n 4
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['slots']")" = 4 ]
}

@test "create, create, status and connect racing on one name: none dies of a signal, each says what it did" {
	local i p r bad=0 rcs pids
	run_tool 0 create -q "$CONN"
	for i in $(seq 60); do
		pids=()
		"$MKSHMCON" create -q "$CONN" 2>>"$BATS_TEST_TMPDIR/c.err" & pids+=($!)
		"$MKSHMCON" create -q "$CONN" 2>>"$BATS_TEST_TMPDIR/c.err" & pids+=($!)
		"$MKSHMCON" status "$CONN" >/dev/null 2>>"$BATS_TEST_TMPDIR/s.err" & pids+=($!)
		timeout 5 "$MKSHMCON" connect -w 0.2 -x a "$CONN" </dev/null >/dev/null 2>>"$BATS_TEST_TMPDIR/x.err" &
		pids+=($!)
		for p in "${pids[@]}"; do
			r=0
			wait "$p" || r=$?
			[ "$r" -lt 128 ] || { bad=$((bad + 1)); rcs+=" $r"; }
		done
	done
	[ "$bad" -eq 0 ] || die "$bad processes died of a signal (exit$rcs)"
	# the refusals are the known ones, one line each
	! grep -v -e "^mkshmcon: connection '$CONN' exists and side a is in use by pid [0-9]*$" \
		-e "^mkshmcon: connection '$CONN' is open in another process (in use, or being created or opened): not re-created$" \
		"$BATS_TEST_TMPDIR/c.err" || die "create said: $(sort "$BATS_TEST_TMPDIR/c.err" | uniq -c)"
	! grep -q -e "bad magic" -e "too small" "$BATS_TEST_TMPDIR/x.err" "$BATS_TEST_TMPDIR/s.err" ||
		die "$(cat "$BATS_TEST_TMPDIR/x.err" "$BATS_TEST_TMPDIR/s.err")"
}

# ------------------------------------------------- peer death and timeouts

@test "connect: a killed peer is noticed at once; the name can be re-used" {
	create_conn "$CONN"
	# neither input ends: both stay connected until a is killed
	hold_fifo "$BATS_TEST_TMPDIR/fa"
	hold_fifo "$BATS_TEST_TMPDIR/fb"
	start_end A "$CONN" a "$BATS_TEST_TMPDIR/fa"
	start_end B "$CONN" b "$BATS_TEST_TMPDIR/fb"
	wait_connected "$CONN"
	local t0 dt
	t0=$(now_ms)
	kill -KILL "$(end_pid A)"
	wait_end B 5
	dt=$(($(now_ms) - t0))
	[ "$dt" -lt 3000 ] || die "side b took ${dt} ms to notice"
	[ "$END_RC" -eq 1 ]
	[ "$END_ERR" = "mkshmcon: connection '$CONN' peer process died before our input ended and before the peer's data ended (0 bytes sent, 0 received)" ] ||
		die "b: $END_ERR"
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['a']['state'], d['a']['pid'], d['b']['state'], d['b']['last_disconnect']")" = \
		"('detached', None, 'detached', 'peer process died')" ]

	# both ends gone: the mailbox is stale and re-created
	run_tool 0 create "$CONN"
	expect_output "mkshmcon: re-created stale connection '$CONN': 128 slots of 16384 bytes each way, con_tmo 1000 ms, defq_max 0"
	random_file "$BATS_TEST_TMPDIR/in" 300000
	start_end B2 "$CONN" b /dev/null -d
	start_end A2 "$CONN" a "$BATS_TEST_TMPDIR/in"
	expect_end A2 0 ""
	expect_end B2 0 ""
	cmp "$BATS_TEST_TMPDIR/in" "$(end_out B2)"
}

@test "connect: a killed peer side can be taken over without re-creating" {
	create_conn "$CONN"
	# a's input never ends: the pair stays connected until a is killed
	hold_fifo "$BATS_TEST_TMPDIR/fa"
	start_end A "$CONN" a "$BATS_TEST_TMPDIR/fa"
	start_end B "$CONN" b /dev/null -d
	wait_connected "$CONN"
	kill -KILL "$(end_pid A)"
	expect_end_match B 1 "$(msg_re "mkshmcon: connection '$CONN' peer process died") $NOT_ENDED_RE \(0 bytes sent, 0 received\)"
	# a new a and b on the same mailbox: a's dead owner does not block
	random_file "$BATS_TEST_TMPDIR/in" 200000
	start_end B2 "$CONN" b /dev/null -d
	start_end A2 "$CONN" a "$BATS_TEST_TMPDIR/in"
	expect_end A2 0 ""
	expect_end B2 0 ""
	cmp "$BATS_TEST_TMPDIR/in" "$(end_out B2)"
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['a']['attaches'], d['b']['attaches'], d['a']['cno'] > 1")" = "(2, 2, True)" ]
}

@test "connect: a stopped peer times out (con_tmo 300ms)" {
	create_conn "$CONN" -t 300ms
	# neither input ends: both stay connected until a is stopped
	hold_fifo "$BATS_TEST_TMPDIR/fa"
	hold_fifo "$BATS_TEST_TMPDIR/fb"
	start_end A "$CONN" a "$BATS_TEST_TMPDIR/fa"
	start_end B "$CONN" b "$BATS_TEST_TMPDIR/fb"
	wait_connected "$CONN"
	local t0 dt
	t0=$(now_ms)
	kill -STOP "$(end_pid A)"
	wait_end B 5
	dt=$(($(now_ms) - t0))
	[ "$dt" -lt 2000 ] || die "side b took ${dt} ms to time out"
	[ "$END_RC" -eq 1 ]
	[ "$END_ERR" = "mkshmcon: connection '$CONN' peer timed out before our input ended and before the peer's data ended (0 bytes sent, 0 received)" ] ||
		die "b: $END_ERR"
	[ "$(side_field "$CONN" b last_disconnect)" = "peer timed out" ]
	# b reset the connection; a, continued, learns why from b's side
	kill -CONT "$(end_pid A)"
	expect_end A 1 "mkshmcon: connection '$CONN' reset by the peer (it heard nothing from us within the connection timeout) before our input ended and before the peer's data ended (0 bytes sent, 0 received)"
}

@test "connect: a sender stalled by a stopped reader times out (wait flow)" {
	local t=$BATS_TEST_TMPDIR
	create_conn "$CONN" -t 300ms -n 4 -m 1k
	hold_fifo "$t/fa"
	start_end A "$CONN" a "$t/fa"
	start_end B "$CONN" b /dev/null -d
	wait_connected "$CONN"
	kill -STOP "$(end_pid B)"
	random_file "$t/in" 100000
	timeout 10 cat "$t/in" >"$t/fa" || true
	# (b's own end of data, -d, may have been stopped before it was sent)
	expect_end_match A 1 "$(msg_re "mkshmcon: connection '$CONN' peer timed out before our input ended")( and before the peer's data ended)? $(msg_re "(# bytes sent, 0 received)")"
	[ "$(side_field "$CONN" a flow)" = wait ]
}

@test "connect: SIGTERM and SIGHUP end an end with 128+signal; the peer exits 1" {
	local t=$BATS_TEST_TMPDIR
	create_conn "$CONN"
	# neither input ends: both stay connected until the signal
	hold_fifo "$t/fa"
	hold_fifo "$t/fb"
	start_end A "$CONN" a "$t/fa"
	start_end B "$CONN" b "$t/fb"
	wait_connected "$CONN"
	kill -TERM "$(end_pid B)"
	expect_end B 143 "mkshmcon: connection '$CONN' stopped by SIGTERM before our input ended and before the peer's data ended (0 bytes sent, 0 received)"
	# b's data did not end: its reset is a failure for a
	expect_end A 1 "mkshmcon: connection '$CONN' $RESET_BY_PEER before our input ended and before the peer's data ended (0 bytes sent, 0 received)"

	# the same with data through first, and SIGHUP
	random_file "$t/in" 100000
	hold_fifo "$t/fa2"
	hold_fifo "$t/fb2"
	start_end A2 "$CONN" a "$t/fa2"
	start_end B2 "$CONN" b "$t/fb2"
	wait_connected "$CONN"
	cat "$t/in" >"$t/fa2"
	wait_size "$(end_out B2)" 100000
	kill -HUP "$(end_pid A2)"
	expect_end A2 129 "mkshmcon: connection '$CONN' stopped by SIGHUP before our input ended and before the peer's data ended (100000 bytes sent, 0 received)"
	expect_end B2 1 "mkshmcon: connection '$CONN' $RESET_BY_PEER before our input ended and before the peer's data ended (0 bytes sent, 100000 received)"
	cmp "$t/in" "$(end_out B2)"
	# a signal while still connecting
	start_end A3 "$CONN" a /dev/null -d
	wait_state "$CONN" a connecting
	kill -TERM "$(end_pid A3)"
	expect_end A3 143 "mkshmcon: connection '$CONN' stopped by SIGTERM before a peer connected (0 bytes sent, 0 received)"
}

@test "connect: SIGHUP ignored at start (nohup) stays ignored; the connection goes on" {
	local t=$BATS_TEST_TMPDIR
	create_conn "$CONN"
	hold_fifo "$t/fa"
	hold_fifo "$t/fb"
	# started as nohup(1) starts it
	END_HUP_IGNORED=1 start_end A "$CONN" a "$t/fa"
	start_end B "$CONN" b "$t/fb"
	wait_connected "$CONN"
	kill -HUP "$(end_pid A)"
	sleep 0.3
	end_running A || die "a exited $(cat "$ENDS/A/rc") on SIGHUP: $(end_err A)"
	[ "$(side_field "$CONN" a state)" = connected ]
	echo hello >"$t/fa"
	wait_size "$(end_out B)" 6
	kill -TERM "$(end_pid A)"
	expect_end A 143 "mkshmcon: connection '$CONN' stopped by SIGTERM before our input ended and before the peer's data ended (6 bytes sent, 0 received)"
}

@test "connect: exits 141 when its stdout is a closed pipe; the sender exits 1" {
	local t=$BATS_TEST_TMPDIR
	random_file "$t/in" 4000000
	create_conn "$CONN"
	(
		set +e
		"$MKSHMCON" connect "$CONN" -x b -d 2>"$t/b.err" | head -c 100 >"$t/b.out"
		echo "${PIPESTATUS[0]}" >"$t/b.rc"
	) 3>&- &
	BG_PIDS+=($!)
	start_end A "$CONN" a "$t/in"
	# b reset the connection: a's data did not all reach b's reader.
	# Whether a had read all its input by then, and had b's (empty) end
	# of data, depends on timing; that b read all of it cannot be.
	expect_end_match A 1 "$(msg_re "mkshmcon: connection '$CONN' $RESET_BY_PEER") before (our input ended( and before the peer's data ended)?|the peer had all our input( and before its data ended)?) $(msg_re "(# bytes sent, 0 received)")"
	local i
	for ((i = 0; i < 250; i++)); do
		[ -s "$t/b.rc" ] && break
		sleep 0.02
	done
	[ "$(cat "$t/b.rc")" = 141 ]
	line_matches "$(cat "$t/b.err")" "$(msg_re "mkshmcon: connection '$CONN': writing to stdout: Broken pipe; reset") $NOT_ENDED_RE $(msg_re "(0 bytes sent, # received)")" ||
		die "b: $(cat "$t/b.err")"
	cmp -n 100 "$t/in" "$t/b.out"
}

@test "connect: a closed stdin or stdout is an error of that stream, not a descriptor taken by something else" {
	local t=$BATS_TEST_TMPDIR
	create_conn "$CONN"
	# without a guard, the signalfd took fd 0 (a signal was read as input)
	# or fd 1 (the peer's data went into it)
	start_end B "$CONN" b /dev/null -d
	run_limited 15 mkshmcon 1 sh -c 'exec "$1" connect "$2" -x a <&-' sh "$MKSHMCON" "$CONN"
	expect_stderr "mkshmcon: reading stdin: Bad file descriptor"
	expect_end_match B 1 "$(msg_re "mkshmcon: connection '$CONN' $RESET_BY_PEER") $NOT_ENDED_RE $(msg_re "(0 bytes sent, 0 received)")"

	printf 'hello\n' >"$t/in"
	start_end A "$CONN" a "$t/in"
	run_limited 15 mkshmcon 1 sh -c 'exec "$1" connect "$2" -x b -d >&-' sh "$MKSHMCON" "$CONN"
	line_matches "$stderr" "$(msg_re "mkshmcon: connection '$CONN': writing to stdout: Bad file descriptor; reset") $NOT_ENDED_RE $(msg_re "(0 bytes sent, 0 received)")" ||
		die "b: $stderr"
	expect_end_match A 1 "$(msg_re "mkshmcon: connection '$CONN' $RESET_BY_PEER") before (our input ended|the peer had all our input)( and before (the peer's|its) data ended)? $(msg_re "(6 bytes sent, 0 received)")"
}

# --------------------------------------------------------- deferred queue

@test "connect --flow defer: overflow with defq_max 0 resets the connection" {
	local t=$BATS_TEST_TMPDIR
	create_conn "$CONN" -d 0 -n 4 -m 1k
	hold_fifo "$t/fa"
	start_end B "$CONN" b /dev/null -d
	start_end A "$CONN" a "$t/fa" --flow defer
	wait_connected "$CONN"
	[ "$(side_field "$CONN" a flow)" = defer ]
	kill -STOP "$(end_pid B)"
	random_file "$t/in" 1000000
	timeout 10 cat "$t/in" >"$t/fa" || true
	# no hang: the sender gives up as soon as the mailbox is full
	expect_end_line A 1 "mkshmcon: connection '$CONN' reset: deferred queue overflow (the peer did not keep up; see create -d) (# bytes sent, 0 received)"
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['a']['last_disconnect'], d['a']['defq_peak'], d['a']['flow']")" = "('deferred queue overflow', 0, 'defer')" ]
	# The reset could not be queued into the full mailbox: the reader,
	# continued, gets what fitted and then finds its peer gone -- and the
	# reason it left in the mailbox.
	kill -CONT "$(end_pid B)"
	expect_end_match B 1 "$(msg_re "mkshmcon: connection '$CONN' reset by the peer (its deferred queue overflowed)") $NOT_ENDED_RE $(msg_re "(0 bytes sent, # received)")"
	local n
	n=$(stat -c %s "$(end_out B)")
	[ "$n" -gt 0 ]
	[ "$n" -le $((4 * 992)) ]
	cmp -n "$n" "$t/in" "$(end_out B)"
}

# Regression: lib/shmcm/shmcm.c, peer_watch() dropped the pidfd of a
# watched peer whose owner word had changed (it exited normally, and
# mbox_close() cleared it) without marking the peer dead.  When the tick ran
# before the pidfd event -- as after SIGCONT -- and the peer's CON_RST could
# not be queued (full mailbox, as after a deferred-queue overflow), its
# death went unnoticed until the supervision timeout: "peer timed out",
# 4/3 con_tmo later, instead of the peer's end at once (told with the
# reason it left behind: its deferred queue overflowed).
@test "connect: a peer that exits while we are stopped is noticed as dead at once" {
	local t=$BATS_TEST_TMPDIR
	create_conn "$CONN" -t 1s -d 0 -n 4 -m 1k
	hold_fifo "$t/fa"
	start_end B "$CONN" b /dev/null -d
	start_end A "$CONN" a "$t/fa" --flow defer
	wait_connected "$CONN"
	kill -STOP "$(end_pid B)"
	random_file "$t/in" 100000
	timeout 10 cat "$t/in" >"$t/fa" || true
	expect_end_line A 1 "mkshmcon: connection '$CONN' reset: deferred queue overflow (the peer did not keep up; see create -d) (# bytes sent, 0 received)"
	# stopped for more than a tick (333 ms), so a tick is due at SIGCONT
	sleep 0.5
	local t0 dt
	t0=$(now_ms)
	kill -CONT "$(end_pid B)"
	wait_end B 5
	dt=$(($(now_ms) - t0))
	[ "$END_RC" -eq 1 ]
	line_matches "$END_ERR" "$(msg_re "mkshmcon: connection '$CONN' reset by the peer (its deferred queue overflowed)") $NOT_ENDED_RE $(msg_re "(0 bytes sent, # received)")" ||
		die "after ${dt} ms: $END_ERR"
	[ "$dt" -lt 500 ] || die "took ${dt} ms"
}

@test "connect --flow defer: the deferred queue holds defq_max packets" {
	local t=$BATS_TEST_TMPDIR
	create_conn "$CONN" -d 8 -n 4 -m 1k
	hold_fifo "$t/fa"
	start_end B "$CONN" b /dev/null -d
	start_end A "$CONN" a "$t/fa" --flow defer
	wait_connected "$CONN"
	kill -STOP "$(end_pid B)"
	random_file "$t/in" 1000000
	timeout 10 cat "$t/in" >"$t/fa" || true
	expect_end_line A 1 "mkshmcon: connection '$CONN' reset: deferred queue overflow (the peer did not keep up; see create -d) (# bytes sent, 0 received)"
	[ "$(side_field "$CONN" a defq_peak)" -eq 8 ]
	[ "$(side_field "$CONN" a last_disconnect)" = "deferred queue overflow" ]
}

@test "connect --flow defer: a transfer within the queue limit is byte-exact" {
	local in=$BATS_TEST_TMPDIR/in
	random_file "$in" 4000000
	create_conn "$CONN" -d 100000
	start_end B "$CONN" b /dev/null -d
	start_end A "$CONN" a "$in" --flow defer
	expect_end A 0 ""
	expect_end B 0 ""
	cmp "$in" "$(end_out B)"
}

# --------------------------------------------------------- status and list

@test "status: text shows both sides connected, with pids" {
	create_conn "$CONN" -n 32 -m 2k -t 3s -d 5
	# a's input never ends: the pair stays connected
	hold_fifo "$BATS_TEST_TMPDIR/fa"
	start_end A "$CONN" a "$BATS_TEST_TMPDIR/fa"
	start_end B "$CONN" b /dev/null -d --flow defer
	wait_connected "$CONN"
	run_tool 0 status "$CONN"
	expect_stderr ""
	local pa pb
	pa=$(end_pid A)
	pb=$(end_pid B)
	[[ $output =~ ^"name        $CONN"$'\n'"slots       32"$'\n'"mtu         2048"$'\n'"mru         2048"$'\n'"slot_size   "[0-9]+$'\n'"con_tmo_ms  3000"$'\n'"defq_max    5"$'\n'"size        "[0-9]+$'\n'"created     "[-0-9T:+]+$'\n'"a:"$'\n' ]] ||
		die "status header: $output"
	[[ $output == *$'\na:\n  state            connected\n  pid              '"$pa"$'\n  flow             wait\n  cno              1\n  peer_cno         1\n'* ]] ||
		die "side a: $output"
	[[ $output == *$'\nb:\n  state            connected\n  pid              '"$pb"$'\n  flow             defer\n'* ]] ||
		die "side b: $output"
	[[ $output == *$'  last_disconnect  -\n'* ]]
}

@test "status -o json and -o yaml: every key, both sides" {
	create_conn "$CONN"
	# b's input never ends: the pair stays connected
	hold_fifo "$BATS_TEST_TMPDIR/fb"
	start_end A "$CONN" a /dev/null -d
	start_end B "$CONN" b "$BATS_TEST_TMPDIR/fb"
	wait_connected "$CONN"
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "' '.join(d.keys())")" = "$HDR_KEYS" ]
	[ "$(json_get "' '.join(d['a'].keys())")" = "$SIDE_KEYS" ]
	[ "$(json_get "' '.join(d['b'].keys())")" = "$SIDE_KEYS" ]
	[ "$(json_get "d['name'], d['slots'], d['mtu'], d['mru'], d['con_tmo_ms'], d['defq_max']")" = \
		"('$CONN', 128, 16384, 16384, 1000, 0)" ]
	[ "$(json_get "d['size']")" -eq "$(stat -c %s "/dev/shm/xprt-shmcm-$CONN")" ]
	[ "$(json_get "d['a']['state'], d['a']['pid'], d['b']['state'], d['b']['pid']")" = \
		"('connected', $(end_pid A), 'connected', $(end_pid B))" ]
	[ "$(json_get "d['a']['cno'], d['b']['peer_cno'], d['a']['alive_count'] > 0")" = "(1, 1, True)" ]

	run_tool 0 status "$CONN" -o yaml
	[[ $output =~ ^"name: $CONN"$'\nslots: 128\nmtu: 16384\nmru: 16384\nslot_size: '[0-9]+$'\ncon_tmo_ms: 1000\ndefq_max: 0\nsize: '[0-9]+$'\ncreated: ' ]] ||
		die "yaml: $output"
	[[ $output == *$'\na:\n  state: connected\n  pid: '"$(end_pid A)"$'\n'* ]]
	[[ $output == *$'\nb:\n  state: connected\n  pid: '"$(end_pid B)"$'\n'* ]]
	# the YAML is the same document as the JSON
	local j=$BATS_TEST_TMPDIR/j y=$BATS_TEST_TMPDIR/y
	"$MKSHMCON" status "$CONN" -o yaml >"$y"
	"$MKSHMCON" status "$CONN" -o json >"$j"
	if python3 -c 'import yaml' 2>/dev/null; then
		python3 -c '
import json, sys, yaml
j, y = json.load(open(sys.argv[1])), yaml.safe_load(open(sys.argv[2]))
for s in "ab":
    for k in ("alive_count", "sent_bytes", "sent_pkts", "recv_bytes", "recv_pkts", "rx_backlog"):
        j[s].pop(k); y[s].pop(k)
assert j == y, (j, y)' "$j" "$y"
	fi
}

@test "status: counters after a transfer" {
	local in=$BATS_TEST_TMPDIR/in
	random_file "$in" 1048576
	create_conn "$CONN"
	start_end B "$CONN" b /dev/null -d
	start_end A "$CONN" a "$in"
	expect_end A 0 ""
	expect_end B 0 ""
	cmp "$in" "$(end_out B)"
	run_tool 0 status "$CONN" -o json
	# 1 MiB in 16352-byte pieces is 65 packets with a 32-byte header each
	[ "$(json_get "d['a']['sent_bytes'] >= 1048576 + 65 * 32, d['a']['sent_pkts'] >= 65 + 1")" = "(True, True)" ]
	[ "$(json_get "d['b']['recv_bytes'] >= 1048576 + 65 * 32, d['b']['recv_pkts'] >= 65 + 1")" = "(True, True)" ]
	[ "$(json_get "d['a']['state'], d['b']['state'], d['a']['pid'], d['b']['pid']")" = "('detached', 'detached', None, None)" ]
	[ "$(json_get "d['a']['last_disconnect'], d['b']['last_disconnect']")" = \
		"('closed after both ends finished', 'closed after both ends finished')" ]
	[ "$(json_get "d['a']['recv_bad'], d['b']['recv_bad'], d['a']['attaches'], d['b']['attaches'], d['a']['cno'], d['b']['peer_cno']")" = "(0, 0, 1, 1, 1, 1)" ]
	# Both ends finished, so both may close at once: an end may have
	# left before the other's CON_RST came, which then stays unread --
	# nothing more.
	[ "$(json_get "d['a']['rx_backlog'] <= 1, d['b']['rx_backlog'] <= 1, d['a']['defq_size']")" = "(True, True, 0)" ]
}

@test "status: usage errors exit 2, unknown connection 1" {
	create_conn "$CONN"
	run_tool 2 status "$CONN" -o xml
	expect_output ""
	expect_stderr "mkshmcon status: unknown output format 'xml' (text, yaml or json)
Try 'mkshmcon status --help'."
	run_tool 2 status "$CONN" extra
	expect_stderr "mkshmcon status: unexpected argument 'extra'
Try 'mkshmcon status --help'."
	run_tool 1 status "${CONN}x"
	expect_output ""
	expect_stderr_line "mkshmcon: no such connection '${CONN}x'"
	run_tool 2 status 'a/b'
	expect_stderr_line "mkshmcon: invalid connection name 'a/b': use letters, digits, '.', '_', '-'"
}

@test "list: our connection, with states and pids, in every format" {
	create_conn "$CONN" -n 8 -m 1k
	start_end A "$CONN" a /dev/null -d
	wait_state "$CONN" a connecting
	run_tool 0 list -o json
	[ "$(json_get "[e for e in d if e['name'] == '$CONN'][0]")" = \
		"{'name': '$CONN', 'slots': 8, 'mtu': 1024, 'a': 'connecting', 'b': 'free', 'pid_a': $(end_pid A), 'pid_b': None}" ]
	run_tool 0 list -o yaml
	[[ $output == *"- name: $CONN"$'\n  slots: 8\n  mtu: 1024\n  a: connecting\n  b: free\n  pid_a: '"$(end_pid A)"$'\n  pid_b: null'* ]] ||
		die "yaml: $output"
	# (the exact text table is checked in a private /dev/shm below: other
	# users' mailboxes change its column widths)
	run_tool 0 list
	[[ $output == *"$CONN"* ]]
	run_tool 2 list extra
	expect_stderr "mkshmcon list: unexpected argument 'extra'
Try 'mkshmcon list --help'."
	run_tool 2 list -o xml
	expect_stderr "mkshmcon list: unknown output format 'xml' (text, yaml or json)
Try 'mkshmcon list --help'."
}

@test "list: with no connections prints nothing (text) or an empty list" {
	private_shm || skip "needs a mount namespace (unshare -m) for an empty /dev/shm"
	run_private 0 '"$M" list'
	expect_output ""
	expect_stderr ""
	run_private 0 '"$M" list -o json'
	expect_output "[]"
	run_private 0 '"$M" list -o yaml'
	expect_output "[]"
	run_private 0 '"$M" status'
	expect_output ""
	run_private 0 '"$M" status -o json'
	expect_output "[]"
}

@test "list: the text table, exactly" {
	private_shm || skip "needs a mount namespace (unshare -m) for an empty /dev/shm"
	run_private 0 '"$M" create -q one && "$M" create -q two -n 8 -m 1k && "$M" connect one -x a -w 100ms </dev/null 2>/dev/null; "$M" list'
	expect_output "NAME  SLOTS  MTU    A         B     PID_A  PID_B
one   128    16384  detached  free  -      -
two   8      1024   free      free  -      -"
	run_private 0 '"$M" create -q one && "$M" create -q two && "$M" status -o json'
	[ "$(json_get "[e['name'] for e in d], [e['a']['state'] for e in d]")" = "(['one', 'two'], ['free', 'free'])" ]
}

@test "status without a name: an invalid mailbox makes it exit 1, others still shown" {
	private_shm || skip "needs a mount namespace (unshare -m) for an empty /dev/shm"
	run_private 1 '"$M" create -q good && "$M" create -q bad && truncate -s 100 /dev/shm/xprt-shmcm-bad && "$M" status -o json'
	expect_stderr_line "mkshmcon: connection 'bad': corrupted mailbox (100 bytes, too small)"
	[ "$(json_get "[e['name'] for e in d]")" = "['good']" ]
}

# Regression: cmd/mkshmcon/status.c, cmd_list() gave an invalid mailbox only
# "name" and "state" columns; the text table takes its columns from the
# first row, so an invalid mailbox sorted first reduced the table to NAME
# STATE (every valid row showing "-"), and one sorted later lost its
# "invalid".
@test "list: an invalid mailbox is shown as such and keeps the table's columns" {
	private_shm || skip "needs a mount namespace (unshare -m) for an empty /dev/shm"
	run_private 0 '"$M" create -q bb-good && "$M" create -q aa-bad && truncate -s 100 /dev/shm/xprt-shmcm-aa-bad && "$M" list'
	expect_output "NAME     SLOTS  MTU    A        B        PID_A  PID_B
aa-bad   -      -      invalid  invalid  -      -
bb-good  128    16384  free     free     -      -"
	run_private 0 '"$M" create -q aa-good && "$M" create -q bb-bad && truncate -s 100 /dev/shm/xprt-shmcm-bb-bad && "$M" list'
	expect_output "NAME     SLOTS  MTU    A        B        PID_A  PID_B
aa-good  128    16384  free     free     -      -
bb-bad   -      -      invalid  invalid  -      -"
}

# ---------------------------------------------------------------------- rm

@test "rm: removes one or more connections" {
	create_conn "${CONN}1"
	create_conn "${CONN}2"
	create_conn "${CONN}3"
	run_tool 0 rm "${CONN}1"
	expect_output ""
	expect_stderr ""
	[ ! -e "/dev/shm/xprt-shmcm-${CONN}1" ]
	run_tool 0 rm "${CONN}2" "shmcm/${CONN}3"
	[ ! -e "/dev/shm/xprt-shmcm-${CONN}2" ]
	[ ! -e "/dev/shm/xprt-shmcm-${CONN}3" ]
	run_tool 1 status "${CONN}2"
}

@test "rm: unknown connection exits 1; the others are still removed" {
	create_conn "$CONN"
	run_tool 1 rm "${CONN}x"
	expect_output ""
	expect_stderr_line "mkshmcon: couldn't remove connection: no such connection '${CONN}x'"
	run_tool 1 rm "${CONN}x" "$CONN"
	expect_stderr_line "mkshmcon: couldn't remove connection: no such connection '${CONN}x'"
	[ ! -e "/dev/shm/xprt-shmcm-$CONN" ]
	run_tool 1 rm -f "${CONN}x"
	expect_stderr_line "mkshmcon: couldn't remove connection: no such connection '${CONN}x'"
	run_tool 2 rm 'a/b'
	expect_stderr_line "mkshmcon: invalid connection name 'a/b': use letters, digits, '.', '_', '-'"
}

@test "rm: refuses a connection in use; rm -f removes it" {
	create_conn "$CONN"
	start_end B "$CONN" b /dev/null -d
	wait_state "$CONN" b connecting
	run_tool 1 rm "$CONN"
	expect_stderr_line "mkshmcon: couldn't remove connection: connection '$CONN' is in use: side b by pid $(end_pid B) (use -f to remove anyway)"
	[ -e "/dev/shm/xprt-shmcm-$CONN" ]
	run_tool 0 status "$CONN"
	run_tool 0 rm -f "$CONN"
	expect_stderr ""
	[ ! -e "/dev/shm/xprt-shmcm-$CONN" ]
	# the end itself lives on until stopped
	end_running B
}

@test "rm: usage errors exit 2" {
	run_tool 2 rm
	expect_stderr "mkshmcon rm: connection name missing
Try 'mkshmcon rm --help'."
	run_tool 2 rm -Z "$CONN"
	expect_stderr "mkshmcon rm: invalid option '-Z'
Try 'mkshmcon rm --help'."
}

@test "rmshmcon: the tool called through a symlink named rmshmcon is rm" {
	local rmshmcon=$BATS_TEST_TMPDIR/rmshmcon
	ln -s "$MKSHMCON" "$rmshmcon"
	create_conn "${CONN}1"
	create_conn "${CONN}2"
	run_as "$rmshmcon" 0 "${CONN}1"
	expect_output ""
	[ ! -e "/dev/shm/xprt-shmcm-${CONN}1" ]
	run_as "$rmshmcon" 0 "shmcm/${CONN}2"
	[ ! -e "/dev/shm/xprt-shmcm-${CONN}2" ]
	run_as "$rmshmcon" 1 "${CONN}1"
	expect_stderr_line "mkshmcon: couldn't remove connection: no such connection '${CONN}1'"
	run_as "$rmshmcon" 0 --help
	[[ $output == *"mkshmcon rm       NAME... [-f]"* ]]
	run_as "$rmshmcon" 2
	expect_stderr "mkshmcon rm: connection name missing
Try 'mkshmcon rm --help'."
}

# -------------------------------------------------------------- usage, help

@test "--help for the tool and for each command exits 0" {
	local h
	for h in --help -h help; do
		run_tool 0 "$h"
		[[ $output == "usage: mkshmcon COMMAND [ARGS]"* ]]
		[[ $output == *"See mkshmcon(8)." ]]
		expect_stderr ""
	done
	local c
	for c in create connect status list rm; do
		run_tool 0 "$c" --help
		[[ ${lines[1]} == "  mkshmcon $c "* ]] || die "$c --help: $output"
		[ "${#lines[@]}" -eq 3 ]
		run_tool 0 "$c" -h
		expect_stderr ""
	done
	run_tool 0 create --help
	expect_output "usage: mkshmcon COMMAND [ARGS]

  mkshmcon create   NAME [-n SLOTS] [-m MTU] [-t CON_TMO] [-d DEFQ_MAX] [-q]
             create a connection (a shared-memory mailbox)"
}

@test "unknown command and no command exit 2 with the usage on stderr" {
	run_tool 2 frobnicate
	expect_output ""
	[[ $stderr == "mkshmcon: unknown command 'frobnicate'"$'\n'"usage: mkshmcon COMMAND [ARGS]"* ]]
	run_tool 2
	expect_output ""
	[[ $stderr == "usage: mkshmcon COMMAND [ARGS]"* ]]
}

@test "connect -v and XPRT_LOG=info log the attach and the connect" {
	create_conn "$CONN"
	hold_fifo "$BATS_TEST_TMPDIR/fa"
	start_end B "$CONN" b /dev/null -d -v
	wait_state "$CONN" b connecting
	XPRT_LOG=info start_end A "$CONN" a "$BATS_TEST_TMPDIR/fa"
	wait_connected "$CONN"
	# the main loops log "connected" once they have seen it
	local i
	for ((i = 0; i < 250; i++)); do
		grep -q connected "$ENDS/A/err" && grep -q connected "$ENDS/B/err" && break
		sleep 0.02
	done
	kill "$HOLD_PID"
	# and each logs when the peer has read all its data (here none: b
	# with -d, a with an input that ended empty).  b's end of data went
	# first, so b always sees it; a's went last and b closes at once on
	# it, so a may learn that from b's close, which it does not log.
	wait_end A
	[ "$END_RC" -eq 0 ] || die "a exited $END_RC: $END_ERR"
	[ "${END_ERR%$'\n'"mkshmcon: the peer has all our data (0 bytes)"}" = "mkshmcon: side a of '$CONN' attached, connecting
mkshmcon: connected" ] || die "a: $END_ERR"
	expect_end B 0 "mkshmcon: side b of '$CONN' attached, connecting
mkshmcon: connected
mkshmcon: the peer has all our data (0 bytes)"
	XPRT_LOG=error run_tool 1 connect "$CONN" -x a -w 100ms </dev/null
	expect_stderr_line "mkshmcon: connection '$CONN': no peer on side b within the wait timeout"
	# debug shows more than info
	XPRT_LOG=debug run_tool 1 connect "$CONN" -x a -w 100ms </dev/null
	[[ $stderr == "mkshmcon: side a of '$CONN' attached, connecting"$'\n'* ]]
}

# --------------------------------------------------------------- single copy

@test "connect: big messages go by reference (one copy); --no-cma turns it off" {
	local t=$BATS_TEST_TMPDIR
	create_conn "$CONN" -m 1k
	# 3 records of 200 KB: too big for a packet, so pulled by reference
	python3 -c '
import os, struct, sys
with open(sys.argv[1], "wb") as f:
    for i in range(3):
        f.write(struct.pack(">I", 200000) + os.urandom(200000))' "$t/recs"
	start_end B "$CONN" b /dev/null -d -M
	start_end A "$CONN" a "$t/recs" -M
	expect_end A 0 ""
	expect_end B 0 ""
	cmp "$t/recs" "$(end_out B)"
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['b']['cma'], d['b']['cma_msgs'], d['b']['cma_bytes'], d['b']['cma_failed']")" = "(True, 3, 600000, 0)" ]
	# far fewer packets than 600000 / 1 KiB fragments
	[ "$(json_get "d['a']['sent_pkts'] < 20")" = "True" ]

	start_end B "$CONN" b /dev/null -d -M --no-cma
	start_end A "$CONN" a "$t/recs" -M
	expect_end A 0 ""
	expect_end B 0 ""
	cmp "$t/recs" "$(end_out B)"
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['b']['cma'], d['b']['cma_msgs']")" = "(False, 0)" ]
	[ "$(json_get "d['a']['sent_pkts'] > 600")" = "True" ]
}

@test "connect: a record the receiver cannot reassemble (no memory) resets; its output ends before it" {
	local t=$BATS_TEST_TMPDIR real=$MKSHMCON
	create_conn "$CONN"
	python3 -c '
import os, struct, sys
with open(sys.argv[1], "wb") as f:
    for d in (b"first\n", os.urandom(60 << 20), b"last\n"):
        f.write(struct.pack(">I", len(d)) + d)' "$t/recs"
	# b cannot get 60 MiB more: once it is up, an address-space limit 33 MB
	# above what it has mapped; under ASan (which reserves terabytes of
	# shadow) its allocation cap
	if ldd "$real" 2>/dev/null | grep -q libasan; then
		printf '#!/bin/sh\nASAN_OPTIONS=$ASAN_OPTIONS:allocator_may_return_null=1:max_allocation_size_mb=32 exec "%s" "$@"\n' \
			"$real" >"$t/limited"
		chmod +x "$t/limited"
		MKSHMCON=$t/limited start_end B "$CONN" b /dev/null -d -M --no-cma
		wait_state "$CONN" b connecting
	else
		start_end B "$CONN" b /dev/null -d -M --no-cma
		wait_state "$CONN" b connecting
		local vm
		vm=$(awk '/^VmSize:/ { print $2 }' "/proc/$(end_pid B)/status")
		prlimit --pid "$(end_pid B)" --as=$(((vm + 33 * 1024) * 1024))
	fi
	start_end A "$CONN" a "$t/recs" -M --no-cma
	wait_end B
	[ "$END_RC" -eq 1 ] || die "b exited $END_RC: $END_ERR"
	[[ $END_ERR == *"dropped fragment of message 1: No buffer space available"* ]] || die "b: $END_ERR"
	line_matches "$(tail -n 1 <<<"$END_ERR")" \
		"$(msg_re "mkshmcon: connection '$CONN' reset: we dropped part of the peer's data (said above; our output ends before it) ")$NOT_ENDED_RE \([0-9]+ bytes sent, [0-9]+ received\)" ||
		die "b: $END_ERR"
	# an exact prefix: the first record, nothing of or after the lost one
	cmp "$(end_out B)" <(head -c 10 "$t/recs")
	# a: the reset comes while it sends the record, or after
	expect_end_match A 1 "$(msg_re "mkshmcon: connection '$CONN' reset by the peer (it dropped some of our data) before ")(our input ended|the peer had all our input) \([0-9]+ bytes sent, 0 received\)"
	run_tool 0 status "$CONN" -o json
	[ "$(json_get "d['b']['recv_bad'] >= 1, d['b']['last_disconnect']")" = "(True, 'dropped data of the peer')" ]
}

# ------------------------------------------------- signals under back-pressure

# sigterm_stalled_b TOOL: b, run as TOOL (the tool, or a wrapper that
# gives it a stdout nobody reads), takes 20 MB from a until its output
# stalls inside its deliver up-call; SIGTERM must end it at once with 143
# and its line, and a, whose data did not all arrive, exits 1.
sigterm_stalled_b() {
	local t=$BATS_TEST_TMPDIR
	MKSHMCON=$1 start_end B "$CONN" b /dev/null -d
	head -c 20M /dev/zero >"$t/in"
	start_end A "$CONN" a "$t/in"
	sleep 1
	end_running B
	kill -TERM "$(end_pid B)"
	wait_end B 3
	[ "$END_RC" -eq 143 ]
	line_matches "$END_ERR" "$(msg_re "mkshmcon: connection '$CONN' stopped by SIGTERM") $NOT_ENDED_RE $(msg_re "(0 bytes sent, # received)")" ||
		die "b: $END_ERR"
	wait_end A 5
	[ "$END_RC" -eq 1 ]
	line_matches "$END_ERR" "$(msg_re "mkshmcon: connection '$CONN' $RESET_BY_PEER before our input ended")( and before the peer's data ended)?$(msg_re " (# bytes sent, 0 received)")" ||
		die "a: $END_ERR"
}

@test "connect: SIGTERM is honoured while stdout is stalled" {
	local t=$BATS_TEST_TMPDIR
	create_conn "$CONN"
	# b's stdout: a pipe whose reader never reads
	mkdir -p "$ENDS/B"
	mkfifo "$ENDS/B/out"
	sleep 60 <"$ENDS/B/out" 3>&- &
	BG_PIDS+=($!)
	sigterm_stalled_b "$MKSHMCON"
}

@test "connect: SIGTERM is honoured while stdout is a socket nobody reads" {
	local t=$BATS_TEST_TMPDIR
	create_conn "$CONN"
	# b's stdout: one end of a socket pair whose other end (held by a
	# child that sleeps) is never read; its flags stay blocking
	cat >"$t/sockout" <<-EOF
	#!/usr/bin/env python3
	import os, socket, sys, time
	real = "$MKSHMCON"
	a, b = socket.socketpair()
	if os.fork() == 0:
	    a.close()
	    time.sleep(60)
	    os._exit(0)
	b.close()
	os.dup2(a.fileno(), 1)
	os.execv(real, [real] + sys.argv[1:])
	EOF
	chmod +x "$t/sockout"
	sigterm_stalled_b "$t/sockout"
}

@test "connect: SIGTERM is honoured while waiting for room in the mailbox" {
	local t=$BATS_TEST_TMPDIR
	create_conn "$CONN" -t 10s -n 4 -m 1k
	hold_fifo "$t/fa"
	start_end B "$CONN" b /dev/null -d
	start_end A "$CONN" a "$t/fa"
	wait_connected "$CONN"
	kill -STOP "$(end_pid B)"
	head -c 1M /dev/zero >"$t/fa" &
	BG_PIDS+=($!)
	sleep 0.5	# a's ring is full: it waits for room
	end_running A
	local t0
	t0=$(now_ms)
	kill -TERM "$(end_pid A)"
	wait_end A 3
	[ "$END_RC" -eq 143 ]
	[ $(($(now_ms) - t0)) -lt 2000 ]
	kill -CONT "$(end_pid B)"
}
