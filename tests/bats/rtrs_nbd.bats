#!/usr/bin/env bats
# rtrs-client nbd: an RNBD device served as an NBD export, used by the NBD
# tools people use (nbdinfo, nbdcopy, qemu-img, fio's nbd engine) over
# rtrs tcp:// to rtrs-server on a file; then abused: garbage, a client that
# hangs up mid-request, refused requests, a read-only export, the server
# killed under IO, a path cut under IO, a signal.  Random choices print
# their seed.  Needs libnbd-bin, nbdkit's neighbours qemu-utils and fio
# (scripts/install-deps).

bats_require_minimum_version 1.5.0

# shellcheck source=rtrs_helpers.bash
load rtrs_helpers

ABUSE=$BATS_TEST_DIRNAME/../nbd-abuse

need() {
	local t
	for t in "$@"; do
		command -v "$t" >/dev/null || skip "$t is not installed (scripts/install-deps)"
	done
}

# start_nbd SESSION ARGS...: rtrs-client nbd in the background; waits for
# the URIs it prints.  Sets NBD_PID, NBD_URI (the first one), NBD_OUT.
start_nbd() {
	local i s=$1
	shift
	NBD_OUT=$T/nbd-$s.out
	# (an earlier run's URIs are not this one's: the wait below must not
	# find them before the new process has truncated the file)
	rm -f "$NBD_OUT"
	# (SIGHUP's default action, whatever the suite was started under)
	env --default-signal=HUP "$RTRS_CLIENT" nbd -s "$s" "$@" >"$NBD_OUT" 2>"$T/nbd-$s.err" &
	NBD_PID=$!
	BG_PIDS+=("$NBD_PID")
	for i in $(seq 1 200); do
		if [ -s "$NBD_OUT" ]; then
			NBD_URI=$(head -1 "$NBD_OUT")
			return 0
		fi
		kill -0 "$NBD_PID" 2>/dev/null || die "rtrs-client nbd died: $(cat "$T/nbd-$s.err")"
		sleep 0.05
	done
	die "rtrs-client nbd did not start: $(cat "$T/nbd-$s.err")"
}

# nbd_info EXPR: a python expression over e, nbdinfo --json's export
nbd_info() {
	nbdinfo --json "$NBD_URI" | python3 -c "import json,sys; e=json.load(sys.stdin)['exports'][0]; print($1)"
}

disk() {
	truncate -s "${2:-16M}" "$T/$1"
}

# one_export SIZE: rtrs-server on a new disk of SIZE (export d1), and
# rtrs-client nbd n1 serving it on $T/n1.sock
one_export() {
	local port
	port=$(free_port)
	disk disk.img "$1"
	start_server "$port" -e "d1=$T/disk.img"
	start_nbd n1 -p "tcp://127.0.0.1:$port" -d d1 --socket "$T/n1.sock"
}

@test "nbd: usage errors and an unreachable server, one line each" {
	run_clt 2 nbd -s n1 -p tcp://127.0.0.1
	[[ ${stderr%%$'\n'*} == "rtrs-client nbd: a device is needed (-d DEVICE)" ]]
	run_clt 2 nbd -s n1 -p tcp://127.0.0.1 -d d1 -l rdma://127.0.0.1
	[[ ${stderr%%$'\n'*} == "rtrs-client nbd: -l: 'rdma://127.0.0.1' is not tcp://HOST[:PORT] (--socket PATH listens on a unix socket)" ]]
	run_clt 2 nbd -s n1 -p tcp://127.0.0.1 -d d1 -l tcp://127.0.0.1:99999
	[[ $stderr == "rtrs-client nbd: -l: "*port* ]]
	run_clt 2 nbd -s n1 -p tcp://127.0.0.1 -d d1 --socket ''
	[[ ${stderr%%$'\n'*} == "rtrs-client nbd: --socket: an empty path" ]]
	run_clt 2 nbd -s n1 -p tcp://127.0.0.1 -d d1 --unread-timeout soon
	[[ ${stderr%%$'\n'*} == "rtrs-client nbd: --unread-timeout: 'soon' is invalid" ]]
	run_clt 1 nbd -s n1 -p "tcp://127.0.0.1:$(free_port)" -d d1 --socket "$T/s"
	[[ $stderr == "rtrs-client nbd: all paths to n1 are down: "* ]]
	[ ! -e "$T/s" ]
	run_clt 0 nbd --help
	[[ $output == *"rtrs-client nbd"*"--socket PATH"*"--unread-timeout DURATION"* ]]
}

@test "nbdinfo: size, flags and block sizes; --access ro exports read-only; a taken socket is refused" {
	need nbdinfo
	local port
	port=$(free_port)
	disk disk.img 8M
	start_server "$port" -e "d1=$T/disk.img"
	start_nbd n1 -p "tcp://127.0.0.1:$port" -d d1 --socket "$T/n1.sock" -l tcp://127.0.0.1:0
	# one URI per listener: tcp ones first
	[[ $NBD_URI =~ ^nbd://127\.0\.0\.1:[0-9]+/d1$ ]]
	[ "$(sed -n 2p "$NBD_OUT")" = "nbd+unix:///d1?socket=$T/n1.sock" ]
	[ "$(nbd_info 'e["export-size"], e["is_read_only"], e["can_flush"], e["can_fua"], e["can_trim"], e["can_zero"], e["can_multi_conn"]')" = \
		"8388608 False True True True True True" ]
	[ "$(nbd_info 'e["block_size_minimum"], e["block_size_preferred"], e["block_size_maximum"]')" = \
		"512 4096 33554432" ]
	# the same export over the unix socket
	NBD_URI=$(sed -n 2p "$NBD_OUT")
	[ "$(nbd_info 'e["export-size"]')" = 8388608 ]
	# a second server on the same socket path: refused, the first goes on
	run_clt 1 nbd -s n9 -p "tcp://127.0.0.1:$port" -d d1 --access ro --socket "$T/n1.sock"
	expect_stderr_line "rtrs-client nbd: --socket $T/n1.sock: in use by a running process"
	start_nbd n2 -p "tcp://127.0.0.1:$port" -d d1 --access ro --socket "$T/n2.sock"
	[ "$(nbd_info 'e["is_read_only"]')" = True ]
}

@test "nbdcopy writes a random image and reads it back byte for byte; qemu-img compares it with the file" {
	need nbdcopy qemu-img
	local port
	port=$(free_port)
	disk disk.img 24M
	head -c 24M /dev/urandom >"$T/img"
	start_server "$port" -e "d1=$T/disk.img"
	start_nbd n1 -p "tcp://127.0.0.1:$port" -d d1 --socket "$T/n1.sock"
	run_limited 60 nbdcopy 0 nbdcopy "$T/img" "$NBD_URI"
	run_limited 60 nbdcopy 0 nbdcopy "$NBD_URI" "$T/back"
	cmp "$T/img" "$T/back"
	cmp "$T/img" "$T/disk.img"
	run_limited 60 qemu-img 0 qemu-img compare -f raw -F raw "$NBD_URI" "$T/disk.img"
	# a change behind the export's back: qemu-img sees it through the export
	printf 'x' | dd of="$T/disk.img" bs=1 seek=12345 conv=notrunc status=none
	run_limited 60 qemu-img 1 qemu-img compare -f raw -F raw "$NBD_URI" "$T/img"
	[[ $output == *"Content mismatch at offset 12288"* ]]
}

@test "flush, FUA on every command, trims and write-zeroes with and without NO_HOLE reach the file; reads match a model" {
	need fio
	local port seed
	port=$(free_port)
	head -c 12M /dev/urandom >"$T/disk.img"
	start_server "$port" -e "d1=$T/disk.img"
	start_nbd n1 -p "tcp://127.0.0.1:$port" -d d1 --socket "$T/n1.sock"
	seed=${NBD_SEED:-$RANDOM}
	echo "# seed $seed" >&3
	run_limited 120 nbd-abuse 0 "$ABUSE" "unix:$T/n1.sock" d1 ops "$seed"
	[[ $output =~ write\ [1-9].*fua\ [1-9].*zeroes\ [1-9].*no_hole\ [1-9].*trim\ [1-9].*flush\ [1-9].*read\ [1-9] ]]
	# FUA on each command once (NBD allows it on all; the RNBD server gets
	# it on a WRITE alone, a FLUSH after a TRIM or WRITE_ZEROES)
	run_limited 20 nbd-abuse 0 "$ABUSE" "unix:$T/n1.sock" d1 fua "$seed"
	expect_output "write 0
read 0
flush 0
trim 0
zeroes 0"
	# write-zeroes with NO_HOLE keeps its MiB allocated, without lets it go
	# (the server does as the kernel's loop driver)
	head -c 2M /dev/urandom | dd of="$T/disk.img" conv=notrunc status=none
	sync "$T/disk.img"
	local b0
	b0=$(stat -c %b "$T/disk.img")
	run_limited 20 nbd-abuse 0 "$ABUSE" "unix:$T/n1.sock" d1 zeroes
	expect_output "no-hole 0
may-trim 0"
	cmp <(head -c 2M "$T/disk.img") <(head -c 2M /dev/zero)
	(( b0 - $(stat -c %b "$T/disk.img") == 2048 )) ||
		die "$b0 blocks before, $(stat -c %b "$T/disk.img") after"
	# a trim of the first 8 MiB makes a hole in the file: zeros, fewer blocks
	fio --name=trim --ioengine=nbd --uri="$NBD_URI" --rw=trim --bs=1M --size=8M \
		--output="$T/fio.out" || die "fio trim: $(cat "$T/fio.out")"
	cmp <(head -c 8M "$T/disk.img") <(head -c 8M /dev/zero)
	(( $(stat -c %b "$T/disk.img") * 512 <= (5 << 20) ))
	# the last 4 MiB, untouched, still hold their random bytes
	[ "$(tail -c 4M "$T/disk.img" | tr -d '\0' | wc -c)" -gt 4000000 ]
}

@test "two clients at once: fio writers on the two halves verify every block, nbdinfo in between" {
	need fio nbdinfo
	local port a b
	port=$(free_port)
	disk disk.img 16M
	start_server "$port" -e "d1=$T/disk.img"
	start_nbd n1 -p "tcp://127.0.0.1:$port" -d d1 -l tcp://127.0.0.1:0
	NBD_URI=$(head -1 "$NBD_OUT")
	for h in 0 1; do
		fio --name="half$h" --ioengine=nbd --uri="$NBD_URI" --rw=randwrite --bs=4k --iodepth=32 \
			--offset=$((h * 8))M --size=8M --verify=crc32c --verify_state_save=0 --verify_fatal=1 \
			--output="$T/fio$h.out" &
		eval "p$h=\$!"
	done
	nbdinfo "$NBD_URI" >/dev/null
	a=0 b=0
	wait "$p0" || a=$?
	wait "$p1" || b=$?
	[ "$a" -eq 0 ] && [ "$b" -eq 0 ] || die "fio: $a $b: $(cat "$T"/fio*.out)"
	grep -q "err= 0" "$T/fio0.out" && grep -q "err= 0" "$T/fio1.out"
}

@test "garbage, hang-ups mid-request and refused requests do not disturb a client at work" {
	need fio
	local port i seed
	port=$(free_port)
	disk disk.img 8M
	start_server "$port" -e "d1=$T/disk.img"
	start_nbd n1 -p "tcp://127.0.0.1:$port" -d d1 --socket "$T/n1.sock"
	# fio works on the upper half; the first MiB must stay zero
	fio --name=work --ioengine=nbd --uri="$NBD_URI" --rw=randwrite --bs=4k --iodepth=16 \
		--offset=4M --size=4M --verify=crc32c --verify_state_save=0 --verify_backlog=256 --time_based --runtime=4 \
		--verify_fatal=1 --output="$T/fio.out" &
	local fp=$!
	seed=${NBD_SEED:-$RANDOM}
	echo "# seeds from $seed" >&3
	for i in $(seq 0 29); do
		timeout 20 "$ABUSE" "unix:$T/n1.sock" d1 garbage $((seed + i)) >/dev/null ||
			die "garbage seed $((seed + i)) did not end"
	done
	timeout 20 "$ABUSE" "unix:$T/n1.sock" d1 half-write
	timeout 20 "$ABUSE" "unix:$T/n1.sock" d1 read-close
	run_limited 20 nbd-abuse 0 "$ABUSE" "unix:$T/n1.sock" d1 errors
	expect_output "unaligned 22
past-end 22
write-past-end 28
zero-length 22
too-long 22
unknown-command 22
bad-flags 22
good 0"
	local rc=0
	wait $fp || rc=$?
	[ "$rc" -eq 0 ] || die "fio: $(cat "$T/fio.out")"
	grep -q "err= 0" "$T/fio.out"
	# the half-sent write was not done
	cmp <(head -c 1M "$T/disk.img") <(head -c 1M /dev/zero)
	# still serving, one line per bad connection, none for the good ones
	kill -0 "$NBD_PID"
	grep -q "closed: \(bad\|unknown\)" "$T/nbd-n1.err"
	grep -q "hung up in the middle of a write's data (not written)" "$T/nbd-n1.err"
	run_clt 0 status -s n1 -o json
	[ "$(json 'j["nbd"]["protocol_errors"] >= 1 and j["nbd"]["accepted"] >= 33')" = True ]
}

@test "over tcp, a client that hangs up while its refused write's data is being dropped: its connection closes" {
	local port i hp
	port=$(free_port)
	disk disk.img 4M
	start_server "$port" -e "d1=$T/disk.img"
	start_nbd n1 -p "tcp://127.0.0.1:$port" -d d1 -l tcp://127.0.0.1:0
	hp=${NBD_URI#nbd://}
	for i in 1 2 3; do
		run_limited 20 nbd-abuse 0 "$ABUSE" "tcp:${hp%%/*}" d1 refused-close
		expect_output "write-past-end 28"
	done
	for i in $(seq 50); do
		run_clt 0 status -s n1 -o json
		[ "$(json 'j["nbd"]["connections"]')" = 0 ] && break
		sleep 0.1
	done
	[ "$(json 'j["nbd"]["connections"], j["nbd"]["accepted"]')" = "0 3" ] ||
		die "connections, accepted: $(json 'j["nbd"]["connections"], j["nbd"]["accepted"]')"
}

@test "2000 requests sent at once, more than a connection may have open: every reply comes" {
	one_export 4M
	run_limited 30 nbd-abuse 0 "$ABUSE" "unix:$T/n1.sock" d1 pipeline
	expect_output "2000 replies"
}

@test "requests that arrive in pieces, with pauses: every write lands, every read returns it" {
	local port i
	port=$(free_port)
	disk disk.img 64M
	start_server "$port" -e "d1=$T/disk.img"
	start_nbd n1 -p "tcp://127.0.0.1:$port" -d d1 --socket "$T/n1.sock"
	for i in 1 2 3; do
		run_limited 60 nbd-abuse 0 "$ABUSE" "unix:$T/n1.sock" d1 trickle
		[[ $output == *"writes and reads intact"* ]] || { echo "$output"; false; }
	done
}

@test "a client that asks without reading: no busy loop, and it cannot take the others' buffers" {
	need nbdcopy
	local port t0 t1 pid
	port=$(free_port)
	disk disk.img 80M
	head -c 8M /dev/urandom >"$T/pat"
	start_server "$port" -e "d1=$T/disk.img"
	start_nbd n1 -p "tcp://127.0.0.1:$port" -d d1 --socket "$T/n1.sock"
	# options without end, none of the answers read: the server stops
	# reading that client instead of spinning on it
	"$ABUSE" "unix:$T/n1.sock" d1 flood 4 &
	pid=$!
	BG_PIDS+=($pid)
	sleep 1
	t0=$(awk '{print $14 + $15}' "/proc/$NBD_PID/stat")
	sleep 2
	t1=$(awk '{print $14 + $15}' "/proc/$NBD_PID/stat")
	[ $((t1 - t0)) -lt 60 ] || die "the server used $((t1 - t0)) ticks in 2 s"
	wait $pid || true
	# two 32 MiB reads never read back hold at most half the buffers:
	# another client still copies 8 MiB in and out
	"$ABUSE" "unix:$T/n1.sock" d1 hog 20 &
	BG_PIDS+=($!)
	sleep 1
	run_limited 15 nbdcopy 0 nbdcopy "$T/pat" "$NBD_URI"
	run_limited 15 nbdcopy 0 nbdcopy "$NBD_URI" "$T/back"
	cmp <(head -c 8M "$T/back") "$T/pat"
	[ -s "$T/disk.img" ]
}

@test "two clients that ask without reading, or stop in a write's data, hold every buffer: after --unread-timeout they are closed, the others go on" {
	need nbdcopy
	local port t0 i
	port=$(free_port)
	disk disk.img 80M
	head -c 8M /dev/urandom >"$T/pat"
	start_server "$port" -e "d1=$T/disk.img"
	start_nbd n1 -p "tcp://127.0.0.1:$port" -d d1 --socket "$T/n1.sock" --unread-timeout 2
	# each holds half the buffers (a 32 MiB read sent, its reply unread)
	for i in 1 2; do
		"$ABUSE" "unix:$T/n1.sock" d1 hog 60 &
		BG_PIDS+=($!)
	done
	sleep 1
	t0=$SECONDS
	run_limited 30 nbdcopy 0 nbdcopy "$T/pat" "$NBD_URI"
	run_limited 30 nbdcopy 0 nbdcopy "$NBD_URI" "$T/back"
	cmp <(head -c 8M "$T/back") "$T/pat"
	[ $((SECONDS - t0)) -lt 20 ] || die "took $((SECONDS - t0)) s"
	[ "$(grep -c "closed: its replies went unread for [0-9.]* s while others waited for buffers (--unread-timeout)" \
		"$T/nbd-n1.err")" -ge 1 ] || die "$(cat "$T/nbd-n1.err")"
	# so do two that stop in the middle of a 32 MiB write's data
	for i in 1 2; do
		"$ABUSE" "unix:$T/n1.sock" d1 write-stall 60 &
		BG_PIDS+=($!)
	done
	sleep 1
	t0=$SECONDS
	run_limited 30 nbdcopy 0 nbdcopy "$NBD_URI" "$T/back2"
	cmp <(head -c 8M "$T/back2") "$T/pat"
	[ $((SECONDS - t0)) -lt 20 ] || die "took $((SECONDS - t0)) s"
	[ "$(grep -c "closed: a write's data stopped coming for [0-9.]* s while others waited for buffers (--unread-timeout)" \
		"$T/nbd-n1.err")" -ge 1 ] || die "$(cat "$T/nbd-n1.err")"
	# the half-sent writes were not done
	cmp <(head -c 8M "$T/disk.img") "$T/pat"
}

@test "free buffers left in pieces by a client that does not read: a 32 MiB request still goes, others too" {
	one_export 80M
	run_limited 60 abuse 0 "$ABUSE" "unix:$T/n1.sock" d1 scatter
	[[ $output == "seed "*": 32 MiB written and read back, then 4 KiB read: error 0" ]] || die "$output"
}

@test "a client that asks without reading, then reads: every answer comes and the handshake goes on" {
	one_export 8M
	for i in 1 2 3; do
		run_limited 30 abuse 0 "$ABUSE" "unix:$T/n1.sock" d1 flood-drain 50000
		[[ $output == "50000 answers, then transmission: READ error 0" ]] || die "$output"
	done
}

@test "an export whose URIs cannot be written does not serve: one line, exit 1, its socket file gone" {
	local port
	port=$(free_port)
	disk disk.img 4M
	start_server "$port" -e "d1=$T/disk.img"
	run --separate-stderr timeout 30 bash -c '"$0" nbd -s n1 -p "$1" -d d1 --socket "$2" >/dev/full' \
		"$RTRS_CLIENT" "tcp://127.0.0.1:$port" "$T/n1.sock"
	[ "$status" -eq 1 ] || die "exit $status: $stderr"
	[ "$stderr" = "rtrs-client nbd: standard output: No space left on device: the export's URIs are lost" ] ||
		die "$stderr"
	[ ! -e "$T/n1.sock" ] || die "socket file left"
}

@test "--socket on a file that is not a socket: refused, the file kept" {
	local port
	port=$(free_port)
	disk disk.img 4M
	start_server "$port" -e "d1=$T/disk.img"
	echo precious >"$T/notasocket"
	run_clt 1 nbd -s n1 -p "tcp://127.0.0.1:$port" -d d1 --socket "$T/notasocket"
	expect_stderr_line "rtrs-client nbd: --socket $T/notasocket: exists and is not a socket"
	[ "$(cat "$T/notasocket")" = precious ]
}

@test "a read-only export refuses writes with EPERM and keeps the data" {
	need nbdcopy
	local port
	port=$(free_port)
	disk disk.img 4M
	head -c 4M /dev/urandom >"$T/disk.img"
	cp "$T/disk.img" "$T/orig"
	start_server "$port" -e "d1=$T/disk.img"
	start_nbd n1 -p "tcp://127.0.0.1:$port" -d d1 --access ro --socket "$T/n1.sock"
	run_limited 20 nbd-abuse 0 "$ABUSE" "unix:$T/n1.sock" d1 write-ro
	expect_output "write 1 read 0"
	head -c 4M /dev/zero >"$T/zeros"
	run_limited 60 nbdcopy 1 nbdcopy "$T/zeros" "$NBD_URI"
	cmp "$T/disk.img" "$T/orig"
	run_limited 60 nbdcopy 0 nbdcopy "$NBD_URI" "$T/back"
	cmp "$T/back" "$T/orig"
}

@test "an export the server keeps read-only is served read-only without --access; --access rw is refused" {
	need nbdinfo nbdcopy
	local port
	port=$(free_port)
	head -c 4M /dev/urandom >"$T/disk.img"
	cp "$T/disk.img" "$T/orig"
	start_server "$port" -e "d1=$T/disk.img:ro"
	start_nbd n1 -p "tcp://127.0.0.1:$port" -d d1 --socket "$T/n1.sock"
	[ "$(cat "$T/nbd-n1.err")" = "rtrs-client nbd: device d1 is a read-only export: serving it read-only" ]
	# nothing to flush either: a flush would be refused
	[ "$(nbd_info 'e["is_read_only"], e["can_trim"], e["can_zero"], e["can_flush"], e["can_fua"]')" = "True False False False False" ]
	run_limited 20 nbd-abuse 0 "$ABUSE" "unix:$T/n1.sock" d1 write-ro
	expect_output "write 1 read 0"
	run_limited 60 nbdcopy 0 nbdcopy "$NBD_URI" "$T/back"
	cmp "$T/back" "$T/orig"
	cmp "$T/disk.img" "$T/orig"
	# asked for explicitly, a writable mapping is not quietly made read-only
	run_clt 1 nbd -s n2 -p "tcp://127.0.0.1:$port" -d d1 --access rw --socket "$T/n2.sock"
	expect_stderr_line "rtrs-client nbd: device d1: read-only export"
}

@test "the server killed: NBD IO fails after --down-timeout instead of hanging, and works again once it is back" {
	need nbdcopy
	local port t0 secs rc=0
	port=$(free_port)
	disk disk.img 8M
	start_server "$port" -e "d1=$T/disk.img"
	start_nbd n1 -p "tcp://127.0.0.1:$port" -d d1 --socket "$T/n1.sock" --down-timeout 2 \
		--reconnect-delay 200 --hb-interval 200 --hb-missed 2
	kill -9 "$SRV_PID"
	wait "$SRV_PID" 2>/dev/null || true
	t0=$(date +%s.%N)
	timeout 60 nbdcopy "$NBD_URI" "$T/out" 2>"$T/copy.err" || rc=$?
	secs=$(python3 -c "import sys,time; print(time.time() - float(sys.argv[1]))" "$t0")
	[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || die "nbdcopy exited $rc after $secs s"
	grep -q "Input/output error" "$T/copy.err" || die "$(cat "$T/copy.err")"
	python3 -c 'import sys; s = float(sys.argv[1]); assert s < 15, s' "$secs"
	kill -0 "$NBD_PID"
	grep -q "all paths to n1 are down" "$T/nbd-n1.err"
	head -c 8M /dev/urandom >"$T/disk.img"
	start_server "$port" -e "d1=$T/disk.img"
	wait_status n1 'j["paths"][0]["state"] == "connected"'
	run_limited 60 nbdcopy 0 nbdcopy "$NBD_URI" "$T/out"
	cmp "$T/out" "$T/disk.img"
}

@test "a restarted server that will not open the device again (another session writes it): said, tried every second, served again once free" {
	need nbdcopy
	local port rc
	port=$(free_port)
	disk disk.img 16M
	head -c 1M /dev/urandom >"$T/pat"
	start_server "$port" -e "d1=$T/disk.img"
	start_nbd n1 -p "tcp://127.0.0.1:$port" -d d1 --socket "$T/n1.sock" --reconnect-delay 6s \
		--down-timeout 60s
	kill -9 "$SRV_PID"
	wait "$SRV_PID" 2>/dev/null || true
	start_server "$port" -e "d1=$T/disk.img"
	# another session opens d1 for writing before n1 is back (its next
	# try is 6 s after the kill), and holds it past that
	(sleep 9; printf 'x%.0s' $(seq 512)) |
		"$RTRS_CLIENT" write -s w2 -p "tcp://127.0.0.1:$port" -d d1 --offset 1M -q ||
		die "the other writer failed"
	grep -q "^rtrs-client nbd: device d1 could not be opened again after the reconnect: .*; IO fails with it, trying again every second$" \
		"$T/nbd-n1.err" || die "$(cat "$T/nbd-n1.err")"
	# free again: n1 opens it within a second or two, and serves
	for i in $(seq 50); do
		grep -q "^rtrs-client nbd: device d1 is open again$" "$T/nbd-n1.err" && break
		sleep 0.1
	done
	grep -q "^rtrs-client nbd: device d1 is open again$" "$T/nbd-n1.err" || die "$(cat "$T/nbd-n1.err")"
	run_limited 20 nbdcopy 0 nbdcopy "$T/pat" "$NBD_URI"
	cmp <(head -c 1M "$T/disk.img") "$T/pat"
	[ "$(head -c 512 <(tail -c +$((1024 * 1024 + 1)) "$T/disk.img"))" = "$(printf 'x%.0s' $(seq 512))" ]
	kill -TERM "$NBD_PID"
	rc=0
	wait "$NBD_PID" || rc=$?
	[ "$rc" -eq 0 ] || die "exit $rc: $(cat "$T/nbd-n1.err")"
}

@test "the only cable pulled (silence, no reset): NBD IO fails within heartbeats + --down-timeout, and works again once it is back" {
	need nbdcopy
	netns_available || skip "no network namespaces here (needs root and iproute2)"
	command -v nft >/dev/null || skip "nft missing: scripts/install-deps"
	local a t0 secs rc=0 i hb=(--hb-interval 200 --hb-missed 2)
	netns_setup 1
	a=$(netns_addr 0 2)
	head -c 8M /dev/urandom >"$T/disk.img"
	netns_srv_bg "$RTRS_SERVER" -l "tcp://0.0.0.0:1234" -e "d1=$T/disk.img" --ctl "$T/srv.sock" \
		"${hb[@]}" >"$SRV_OUT" 2>"$SRV_ERR"
	BG_PIDS+=($!)
	for i in $(seq 1 100); do grep -q '^listening ' "$SRV_OUT" && break; sleep 0.05; done
	# the unix socket is a file: reachable from outside the namespace
	netns_cli_bg "$RTRS_CLIENT" nbd -s n1 -p "tcp://$a" -d d1 --socket "$T/n1.sock" \
		--down-timeout 2 --reconnect-delay 200 "${hb[@]}" >"$T/nbd.out" 2>"$T/nbd.err"
	NBD_PID=$!
	BG_PIDS+=($NBD_PID)
	for i in $(seq 1 200); do [ -s "$T/nbd.out" ] && break; sleep 0.05; done
	NBD_URI=$(head -1 "$T/nbd.out")
	[ -n "$NBD_URI" ] || die "rtrs-client nbd did not start: $(cat "$T/nbd.err")"
	run_limited 60 nbdcopy 0 nbdcopy "$NBD_URI" "$T/out"
	cmp "$T/out" "$T/disk.img"
	# 4 heartbeat intervals of 0.2 s at most to give the path up, then 2 s
	t0=$(date +%s.%N)
	netns_cut 0
	timeout 60 nbdcopy "$NBD_URI" "$T/out" 2>"$T/copy.err" || rc=$?
	secs=$(python3 -c "import sys,time; print(time.time() - float(sys.argv[1]))" "$t0")
	echo "# EIO after $secs s" >&3
	[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || die "nbdcopy exited $rc after $secs s"
	grep -q "Input/output error" "$T/copy.err" || die "$(cat "$T/copy.err")"
	python3 -c 'import sys; s = float(sys.argv[1]); assert 2 <= s < 15, s' "$secs"
	kill -0 "$NBD_PID"
	netns_restore 0
	wait_status n1 'j["paths"][0]["state"] == "connected"'
	run_limited 60 nbdcopy 0 nbdcopy "$NBD_URI" "$T/out"
	cmp "$T/out" "$T/disk.img"
}

@test "one of two paths cut under fio with verify: no error, the path comes back" {
	need fio
	local port rc=0
	port=$(free_port)
	disk disk.img 16M
	start_server "$port" -e "d1=$T/disk.img"
	start_nbd n1 -p "tcp://127.0.0.1:$port" -p "tcp://127.0.0.2:$port" -d d1 --policy rr \
		--reconnect-delay 100 --socket "$T/n1.sock"
	fio --name=cut --ioengine=nbd --uri="$NBD_URI" --rw=randwrite --bs=16k --iodepth=32 \
		--size=16M --verify=crc32c --verify_state_save=0 --verify_backlog=128 --verify_fatal=1 --time_based \
		--runtime=6 --output="$T/fio.out" &
	local fp=$!
	wait_status n1 'all(p["inflight"] > 0 for p in j["paths"])'
	run_clt 0 path disconnect -s n1 1
	# IO goes on over path 0 alone
	wait_status n1 'j["paths"][1]["state"] != "connected"'
	run_clt 0 status -s n1 -o json
	local w0
	w0=$(json 'j["paths"][0]["writes"]')
	wait_status n1 "j['paths'][0]['writes'] > $w0 + 100"
	run_clt 0 path reconnect -s n1 1
	wait_status n1 'j["paths"][1]["state"] == "connected"'
	wait $fp || rc=$?
	[ "$rc" -eq 0 ] || die "fio: $(cat "$T/fio.out")"
	grep -q "err= 0" "$T/fio.out"
}

@test "the only path disconnected by request: the export stays, reads fail with EIO, reconnect serves again" {
	need nbdcopy
	local port
	port=$(free_port)
	disk disk.img 4M
	start_server "$port" -e "d1=$T/disk.img"
	start_nbd n1 -p "tcp://127.0.0.1:$port" -d d1 --socket "$T/n1.sock"
	run_limited 30 nbdcopy 0 nbdcopy "$NBD_URI" "$T/out"
	run_clt 0 path disconnect -s n1 0
	expect_output "path 0 tcp://127.0.0.1:$port: disconnected"
	wait_status n1 'j["paths"][0]["state"] == "closed"'
	run_limited 30 nbdcopy 1 nbdcopy "$NBD_URI" "$T/out2"
	[[ $stderr == *"Input/output error"* ]] || die "$stderr"
	sleep 1
	kill -0 "$NBD_PID" || die "the export ended: $(cat "$T/nbd-n1.err")"
	# nothing comes back by itself: no wait is promised
	grep -qx "rtrs-client nbd: every path to n1 is closed: IO fails until 'path reconnect' or 'path add'" \
		"$T/nbd-n1.err" || die "$(cat "$T/nbd-n1.err")"
	! grep -q "waiting for a reconnect" "$T/nbd-n1.err" || die "$(cat "$T/nbd-n1.err")"
	run_clt 0 path reconnect -s n1 0
	wait_status n1 'j["paths"][0]["state"] == "connected"'
	rm -f "$T/out"
	run_limited 30 nbdcopy 0 nbdcopy "$NBD_URI" "$T/out"
	cmp "$T/out" "$T/disk.img"
}

@test "stopped and continued (^Z, fg) under fio: it goes on serving, no error" {
	need fio
	local port rc=0 i
	port=$(free_port)
	disk disk.img 8M
	start_server "$port" -e "d1=$T/disk.img"
	start_nbd n1 -p "tcp://127.0.0.1:$port" -d d1 --socket "$T/n1.sock"
	fio --name=stop --ioengine=nbd --uri="$NBD_URI" --rw=randwrite --bs=4k --iodepth=16 \
		--size=8M --verify=crc32c --verify_state_save=0 --verify_backlog=64 --verify_fatal=1 --time_based \
		--runtime=4 --output="$T/fio.out" &
	local fp=$!
	sleep 0.5
	for i in 1 2 3; do
		kill -STOP "$NBD_PID"
		sleep 0.2
		kill -CONT "$NBD_PID"
		sleep 0.3
	done
	wait $fp || rc=$?
	[ "$rc" -eq 0 ] || die "fio: $(cat "$T/fio.out") $(cat "$T/nbd-n1.err")"
	kill -0 "$NBD_PID" || die "it exited: $(cat "$T/nbd-n1.err")"
}

@test "SIGTERM, and SIGHUP (its terminal gone) alike: the export closes, its socket files go, exit 0" {
	local port rc sig
	port=$(free_port)
	disk disk.img 4M
	start_server "$port" -e "d1=$T/disk.img"
	for sig in TERM HUP; do
		start_nbd n1 -p "tcp://127.0.0.1:$port" -d d1 --socket "$T/n1.sock"
		[ -S "$T/n1.sock" ]
		[ -S "$XDG_RUNTIME_DIR/xprt/rtrs-client-n1.sock" ]
		kill -"$sig" "$NBD_PID"
		rc=0
		wait "$NBD_PID" || rc=$?
		[ "$rc" -eq 0 ] || die "SIG$sig: exit $rc: $(cat "$T/nbd-n1.err")"
		[ ! -e "$T/n1.sock" ]
		[ ! -e "$XDG_RUNTIME_DIR/xprt/rtrs-client-n1.sock" ]
	done
}

@test "SIGTERM with requests stuck at a stopped server: the end within 5 s, exit 1; a second signal ends it at once" {
	local port rc t0 sig2
	port=$(free_port)
	disk disk.img 80M
	start_server "$port" -e "d1=$T/disk.img"
	for sig2 in "" TERM; do
		start_nbd n1 -p "tcp://127.0.0.1:$port" -d d1 --socket "$T/n1.sock"
		kill -STOP "$SRV_PID"
		# two 32 MiB reads the server will not answer while stopped
		"$ABUSE" "unix:$T/n1.sock" d1 hog 30 &
		BG_PIDS+=($!)
		sleep 0.5
		t0=$(date +%s%N)
		kill -TERM "$NBD_PID"
		if [ -n "$sig2" ]; then
			sleep 0.5
			kill -"$sig2" "$NBD_PID"
		fi
		rc=0
		wait "$NBD_PID" || rc=$?
		t0=$((($(date +%s%N) - t0) / 1000000))
		kill -CONT "$SRV_PID"
		[ "$rc" -eq 1 ] || die "exit $rc: $(cat "$T/nbd-n1.err")"
		grep -q "request(s) got no answer before the end" "$T/nbd-n1.err"
		if [ -n "$sig2" ]; then
			[ "$t0" -lt 2500 ] || die "a second signal: the end after $t0 ms"
		else
			[ "$t0" -lt 9000 ] || die "the end after $t0 ms"
		fi
		[ ! -e "$T/n1.sock" ]
	done
}

@test "SIGTERM under a stream of writes: what was asked is answered, then ESHUTDOWN, then the end; exit 0, every write answered 0 is on disk" {
	local seed rc=0 ap off sum
	one_export 80M
	seed=${XPRT_SEED:-$RANDOM}
	echo "# seed $seed" >&3
	"$ABUSE" "unix:$T/n1.sock" d1 stop "$seed" >"$T/a.out" 2>"$T/a.err" &
	ap=$!
	BG_PIDS+=($ap)
	sleep 1
	kill -TERM "$NBD_PID"
	wait "$NBD_PID" || rc=$?
	wait "$ap" || die "seed $seed: the client failed: $(tail -3 "$T/a.out") $(cat "$T/a.err")"
	[ "$rc" -eq 0 ] || die "seed $seed: rtrs-client nbd exited $rc: $(cat "$T/nbd-n1.err")"
	# the client saw the server say it was stopping, and read to the end
	[[ $(tail -1 "$T/a.out") =~ ^[1-9][0-9]*\ written,\ [1-9][0-9]*\ ESHUTDOWN,\ 0\ unanswered,\ end\ of\ stream$ ]] ||
		die "seed $seed: $(tail -1 "$T/a.out")"
	while read -r _ off sum; do
		[ "$(dd if="$T/disk.img" bs=4096 skip=$((off / 4096)) count=1 status=none | sha256sum | cut -d' ' -f1)" = "$sum" ] ||
			die "seed $seed: the block at $off, answered 0, is not on disk"
	done < <(grep '^ok ' "$T/a.out")
}

@test "map, unmap, list-mapped: usage errors and what is not mapped, one line each" {
	run_clt 2 map -s m1 -p tcp://127.0.0.1
	[[ ${stderr%%$'\n'*} == "rtrs-client map: a device is needed (-d DEVICE)" ]]
	run_clt 2 map -s m1 -p tcp://127.0.0.1 -d d1 --nbd-device /dev/sda
	[[ ${stderr%%$'\n'*} == "rtrs-client map: --nbd-device: '/dev/sda' is not /dev/nbdN" ]]
	run_clt 2 map -s m1 -p tcp://127.0.0.1 -d d1 --nbd-connections 17
	[[ ${stderr%%$'\n'*} == "rtrs-client map: --nbd-connections: '17' is "*"(1 to 16)" ]]
	run_clt 2 unmap
	[[ ${stderr%%$'\n'*} == "rtrs-client unmap: one /dev/nbdN, /dev/ublkbN or session name is needed" ]]
	run_clt 1 unmap /dev/nbd99
	expect_stderr_line "rtrs-client unmap: /dev/nbd99 is not mapped by rtrs-client"
	run_clt 1 unmap /dev/ublkb99
	expect_stderr_line "rtrs-client unmap: /dev/ublkb99 is not mapped by rtrs-client"
	run_clt 2 map -s m1 -p tcp://127.0.0.1 -d d1 --ublk --nbd-device /dev/nbd0
	[[ ${stderr%%$'\n'*} == "rtrs-client map: --ublk serves no NBD device: no --nbd-device or --nbd-connections with it" ]]
	run_clt 2 map -s m1 -p tcp://127.0.0.1 -d d1 --nbd-connections 2 --ublk=3
	[[ ${stderr%%$'\n'*} == "rtrs-client map: --ublk serves no NBD device: no --nbd-device or --nbd-connections with it" ]]
	run_clt 2 map -s m1 -p tcp://127.0.0.1 -d d1 --ublk=/dev/sda
	[[ ${stderr%%$'\n'*} == "rtrs-client map: --ublk: '/dev/sda' is not a device id or /dev/ublkbN" ]]
	run_clt 2 map -s m1 -p tcp://127.0.0.1 -d d1 --ublk=/dev/ublkb1048576
	[[ ${stderr%%$'\n'*} == "rtrs-client map: --ublk: '/dev/ublkb1048576' is not a device id or /dev/ublkbN" ]]
	run_clt 1 unmap nosuchsession
	expect_stderr_line "rtrs-client unmap: no device is mapped by session nosuchsession"
	run_clt 2 list-mapped -o xml
	run_clt 0 list-mapped -o json
	[ "$(json 'all(m["session"] != "nosuchsession" for m in j["mapped"])')" = True ]
}

@test "map --ublk where the kernel has no ublk driver: one line naming it, exit 1, the server serves on" {
	local port
	[ ! -e /dev/ublk-control ] || skip "this kernel has ublk (/dev/ublk-control): tests/vm/rtrs-ublk.sh maps for real"
	port=$(free_port)
	disk disk.img 4M
	start_server "$port" -e "d1=$T/disk.img"
	run_clt 1 map --ublk -s u1 -p "tcp://127.0.0.1:$port" -d d1
	expect_stderr_line "rtrs-client map: /dev/ublk-control: No such file or directory (modprobe ublk_drv; Linux 6.4 or later)"
	[ -z "$output" ]
	# nothing is left open at the server: the device opens for writing
	run_clt 0 write -s w1 -p "tcp://127.0.0.1:$port" -d d1 < <(head -c 4096 /dev/urandom)
}
