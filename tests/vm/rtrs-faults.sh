#!/usr/bin/env bash
# Faults under IO with the kernel's rnbd-client mapping a brd ram disk over
# two paths (rxe0, and the veth wire of xprt-vm -w), once against the
# kernel's own rnbd-server (the reference) and once against our
# rtrs-server, the same faults in the same order:
#   cut     the wire silently drops everything for CUT_SECS s (both ends'
#           neighbour entries point at a MAC nobody has)
#   remove  the wire path removed on the client (remove_path) and added
#           again (add_path)
#   drop    the server disconnects the wire path (its sysfs disconnect;
#           ours: rtrs-server disconnect SESSION PEER)
#   restart (ours only: the kernel's server cannot be restarted under a
#           mapped session) the server killed and started again, no IO
#           running; afterwards IO works again
# Under each of the first three, fio writes and verifies (crc32c) through
# /dev/rnbdN: no IO error and no mismatch is allowed, and both paths must
# be connected again within BACK_WAIT s (the kernel client waits its fixed
# 30 s before a reconnect).  The time from the fault's end until then is
# printed for both servers side by side, and ours must recover from every
# fault the reference recovers from.
# Then (ours) a locked-memory limit too small for the server's or the
# client's buffers (CAP_IPC_LOCK dropped): one line that names it.
#
#   make tools && tests/vm/xprt-vm -f rtrs -w -t 1500 -e B=build -- tests/vm/rtrs-faults.sh
#
# Reports TAP, then "rtrs-faults: PASS (N checks)" or "... FAIL (...)".
# Env: SERVERS ("kernel ours"), FAULTS ("cut remove drop restart"), FIO_SECS (10),
#      CUT_SECS (4), BACK_WAIT (100: a path the server has not yet seen fail
#      is refused once, as by the kernel, and the client tries again 30 s on).
set -u
cd "$(dirname "$0")/../.." || exit 2
SRV=${RTRS_SERVER:-${B:-build}/rtrs-server}
case $SRV in /*) ;; *) SRV=$PWD/$SRV ;; esac
SERVERS=${SERVERS:-kernel ours} FAULTS=${FAULTS:-cut remove drop restart} FIO_SECS=${FIO_SECS:-10} CUT_SECS=${CUT_SECS:-4}
BACK_WAIT=${BACK_WAIT:-100}
W=$(mktemp -d /tmp/rtrs-faults.XXXXXX) T=$W SRV_PID=
declare -A BACK
. tests/vm/tap.sh
cleanup() {
	[ -n "$SRV_PID" ] && kill -KILL "$SRV_PID" 2>/dev/null
	rm -rf "$W"
}
trap cleanup EXIT
finish() { tap_finish rtrs-faults; }
bail() {
	echo "# dmesg:"; dmesg | tail -n 30 | sed 's/^/#   /'
	[ -s "$W/srv.err" ] && { echo "# rtrs-server stderr:"; tail -n 30 "$W/srv.err" | sed 's/^/#   /'; }
	finish
}
if [ -z "${XPRT_VM:-}" ] || [ ! -f "${XPRT_VM_MODDIR:-/nonexistent}/rnbd-server.ko" ] ||
	[ -z "${XPRT_VM_WIRE_A:-}" ]; then
	notok "setup # not inside tests/vm/xprt-vm -f rtrs -w"; echo "1..$n"; exit 1
fi
A=$XPRT_VM_WIRE_A B_=$XPRT_VM_WIRE_B NA=$XPRT_VM_WIRE_NETDEV_A NB=$XPRT_VM_WIRE_NETDEV_B
PLAIN="ip:$XPRT_VM_IP" WIRE="ip:$A@ip:$B_"
echo "# $(uname -r); servers: $SERVERS; paths $PLAIN and $WIRE"
rmmod rnbd_server rtrs_server 2>/dev/null
rmmod brd 2>/dev/null
check "modprobe rtrs-client rnbd-client brd" eval \
	'modprobe rtrs-client && modprobe rnbd-client && modprobe brd rd_nr=1 rd_size=65536' || bail

# --- the two servers --------------------------------------------------------------
server_start() {	# kernel|ours
	if [ "$1" = kernel ]; then
		modprobe rtrs-server always_invalidate=Y && modprobe rnbd-server
	else
		: >"$W/srv.out"
		"$SRV" -l "rdma://$XPRT_VM_IP:1234" -l "rdma://$B_:1234" --dev-search-path / \
			--ctl "$W/ctl.sock" -v >"$W/srv.out" 2>>"$W/srv.err" &
		SRV_PID=$!
		wait_for 300 eval "[ \$(grep -c '^listening ' '$W/srv.out') -eq 2 ]"
	fi
}
server_stop() {	# kernel|ours
	if [ "$1" = kernel ]; then
		wait_for 300 eval '[ -z "$(ls -A /sys/class/rtrs-server/ 2>/dev/null)" ]' &&
			rmmod rnbd_server && rmmod rtrs_server
	else
		kill -TERM "$SRV_PID" && wait "$SRV_PID"
		local rc=$?
		SRV_PID=
		return $rc
	fi
}
# the server drops the wire path: the kernel's sysfs disconnect (its
# src_addr is the client's), ours by peer
server_drop() {	# kernel|ours SESSION
	if [ "$1" = kernel ]; then
		local p
		for p in /sys/class/rtrs-server/"$2"/paths/*; do
			grep -qx "ip:$A" "$p/src_addr" 2>/dev/null && { echo 1 >"$p/disconnect"; return; }
		done
		echo "# no server path to $A: $(grep -H . /sys/class/rtrs-server/"$2"/paths/*/*_addr | tr '\n' ' ')"
		return 1
	fi
	local peer
	peer=$("$SRV" status --ctl "$W/ctl.sock" -o json | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(next(p["peer"] for p in d["paths"] if p["session"] == sys.argv[1] and p["peer"].startswith(sys.argv[2] + ":")))' "$2" "$A") &&
		"$SRV" disconnect "$2" "$peer" --ctl "$W/ctl.sock" >/dev/null
}

# --- the client side --------------------------------------------------------------
map() {	# SESS -> the rnbd device's name
	local d
	echo "sessname=$1 path=$PLAIN path=$WIRE device_path=/dev/ram0 access_mode=rw" \
		>/sys/class/rnbd-client/ctl/map_device || return 1
	for d in /sys/block/rnbd*; do
		[ "$(cat "$d/rnbd/session" 2>/dev/null)" = "$1" ] && { echo "${d##*/}"; return 0; }
	done
	return 1
}
wire_dir() {	# SESS -> the wire path's sysfs directory
	local p
	for p in /sys/class/rtrs-client/"$1"/paths/*; do
		case ${p##*/} in *"@ip:$B_") echo "$p"; return 0 ;; esac
	done
	return 1
}
all_connected() {	# SESS: two paths, both connected
	local p k=0
	for p in /sys/class/rtrs-client/"$1"/paths/*; do
		[ "$(cat "$p/state" 2>/dev/null)" = connected ] || return 1
		k=$((k + 1))
	done
	[ $k -eq 2 ]
}
wire_gone() { ! wire_dir "$1" >/dev/null; }	# SESS
some_down() { ! all_connected "$1"; }	# SESS
wire_down() {	# SESS: the wire path is not connected (or gone)
	local p
	p=$(wire_dir "$1") || return 0
	[ "$(cat "$p/state" 2>/dev/null)" != connected ]
}
fio_start() {	# DEV NAME
	fio --name="$2" --filename="/dev/$1" --direct=1 --ioengine=libaio --rw=randwrite --bs=16k \
		--iodepth=16 --size=32M --verify=crc32c --verify_state_save=0 --verify_backlog=128 \
		--verify_fatal=1 --time_based --runtime="$FIO_SECS" --output="$W/$2.fio" >/dev/null 2>&1 &
	FIO_PID=$!
}
fio_ok() {	# NAME
	wait "$FIO_PID" && grep -q 'err= 0' "$W/$1.fio" ||
		{ sed 's/^/#   /' "$W/$1.fio" | grep -E 'err=|verify|error' | head -n 10; return 1; }
}
cut_wire() {	# the wire drops everything for CUT_SECS s
	local na nb
	na=$(ip neigh show "$B_" dev "$NA" | awk '{print $3}')
	nb=$(ip neigh show "$A" dev "$NB" | awk '{print $3}')
	ip neigh replace "$B_" dev "$NA" lladdr 02:00:00:00:00:0b nud permanent
	ip neigh replace "$A" dev "$NB" lladdr 02:00:00:00:00:0a nud permanent
	sleep "$CUT_SECS"
	if [ -n "$na" ]; then ip neigh replace "$B_" dev "$NA" lladdr "$na" nud permanent
	else ip neigh del "$B_" dev "$NA"; fi
	if [ -n "$nb" ]; then ip neigh replace "$A" dev "$NB" lladdr "$nb" nud permanent
	else ip neigh del "$A" dev "$NB"; fi
}
# FAULT SRV SESS: inject one fault (returns when it is over)
fault() {
	local p
	case $1 in
	cut) cut_wire ;;
	remove)
		p=$(wire_dir "$3") && echo 1 >"$p/remove_path" &&
			wait_for 300 wire_gone "$3" && sleep 2 &&
			echo "$WIRE" >"/sys/class/rtrs-client/$3/add_path" ;;
	drop) server_drop "$2" "$3" && { wait_for 300 wire_down "$3" ||
		{ echo "# the client's wire path stayed connected"; false; }; } ;;
	restart)
		kill -KILL "$SRV_PID"; wait "$SRV_PID" 2>/dev/null; SRV_PID=
		wait_for 600 some_down "$3" && server_start ours ;;
	esac
}

for srv in $SERVERS; do
	sess=flt-$srv
	check "$srv: server up" server_start "$srv" || bail
	if ! dev=$(map "$sess"); then notok "$srv: map over two paths"; bail; fi
	ok "$srv: the kernel's rnbd-client maps /dev/ram0 over two paths as /dev/$dev"
	check "$srv: both paths connected" wait_for 600 all_connected "$sess" || bail
	for f in $FAULTS; do
		[ "$f" = restart ] && [ "$srv" = kernel ] && continue
		mark=$({ wc -l <"$W/srv.err"; } 2>/dev/null || echo 0)
		if [ "$f" != restart ]; then fio_start "$dev" "$srv-$f"; sleep 3; fi
		check "$srv/$f: injected" fault "$f" "$srv" "$sess"
		s=$SECONDS
		if wait_for $((BACK_WAIT * 10)) all_connected "$sess"; then
			BACK[$srv/$f]=$((SECONDS - s))
			ok "$srv/$f: both paths connected again ($((SECONDS - s)) s after the fault)"
		else
			BACK[$srv/$f]=-
			notok "$srv/$f: both paths connected again within $BACK_WAIT s"
			for p in /sys/class/rtrs-client/"$sess"/paths/*; do
				echo "#   ${p##*/}: $(cat "$p/state")"
			done
		fi
		# what the server saw meanwhile
		if [ "$srv" = ours ]; then
			tail -n +"$((mark + 1))" "$W/srv.err" | grep -v 'OPEN of' | head -n 12 |
				sed 's/^/#   srv: /'
		elif [ -n "${FAULT_DMESG:-}" ]; then
			dmesg | grep -i 'rtrs\|rnbd' | tail -n 12 | sed 's/^/#   dmesg: /'
		fi
		if [ "$f" != restart ]; then
			check "$srv/$f: fio write+verify across it: no error, no mismatch" fio_ok "$srv-$f"
		else
			head -c 4M /dev/urandom >"$W/pat"
			check "$srv/$f: IO after the restart, byte for byte" eval \
				"dd if='$W/pat' of=/dev/$dev bs=1M oflag=direct status=none &&
				 cmp '$W/pat' <(dd if=/dev/$dev bs=1M count=4 iflag=direct status=none)"
		fi
	done
	check "$srv: unmap" eval "echo normal >/sys/block/$dev/rnbd/unmap_device"
	check "$srv: server stops" server_stop "$srv"
done

# --- a locked-memory limit too small for the buffers (ours) -------------------
# (root locks any amount with CAP_IPC_LOCK: it is dropped here)
CLT=$(dirname "$SRV")/rtrs-client
if [[ " $SERVERS " == *" ours "* ]]; then
	LOWLOCK=(setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock bash -c 'ulimit -l 256 && exec "$@"' -)
	: >"$W/srv.out"
	# one command, so that $! is the server itself (exec all the way)
	"${LOWLOCK[@]}" "$SRV" -l "rdma://$XPRT_VM_IP:1302" --dev-search-path / --ctl "$W/ctl.sock" \
		>"$W/srv.out" 2>"$W/srv.err" &
	SRV_PID=$!
	check "memlock: rtrs-server under ulimit -l 256 listens" \
		wait_for 300 grep -q '^listening ' "$W/srv.out"
	rc=0
	timeout 60 "$CLT" read -s ml -p "rdma://$XPRT_VM_IP:1302" -d /dev/ram0 --length 1M -q \
		--timeout 10s >/dev/null 2>"$W/c.err" || rc=$?
	check "memlock: the client fails (exit 1)" test "$rc" -eq 1
	sed 's/^/#   /' "$W/c.err"
	check "memlock: the server's log names the limit" grep -q 'RLIMIT_MEMLOCK is 256 KiB: raise ulimit -l, or LimitMEMLOCK=)' "$W/srv.err"
	grep -m1 RLIMIT_MEMLOCK "$W/srv.err" | sed 's/^/#   /'
	check "memlock: rtrs-server runs on" kill -0 "$SRV_PID"
	check "memlock: rtrs-server exits 0 on SIGTERM" server_stop ours
	check "memlock: rtrs-server without the limit" server_start ours
	rc=0
	"${LOWLOCK[@]}" timeout 60 "$CLT" read -s ml2 -p "rdma://$XPRT_VM_IP:1234" -d /dev/ram0 --length 1M -q \
		>/dev/null 2>"$W/c.err" || rc=$?
	check "memlock: a client under ulimit -l 256 fails in one line naming the limit" eval \
		"[ $rc -eq 1 ] && [ \$(wc -l <'$W/c.err') -eq 1 ] && grep -q 'RLIMIT_MEMLOCK is 256 KiB: raise ulimit -l, or LimitMEMLOCK=)$' '$W/c.err'"
	sed 's/^/#   /' "$W/c.err"
	check "memlock: rtrs-server exits 0 on SIGTERM" server_stop ours
fi

# side by side: ours must recover from what the reference recovers from
echo "# seconds from the fault's end until both paths are connected again:"
printf '#   %-8s %8s %8s\n' fault kernel ours
for f in cut remove drop restart; do
	printf '#   %-8s %8s %8s\n' "$f" "${BACK[kernel/$f]:--}" "${BACK[ours/$f]:--}"
	if [[ ${BACK[kernel/$f]:--} != - && ${BACK[ours/$f]:-} ]]; then
		check "ours recovers from $f as the kernel's server does" test "${BACK[ours/$f]}" != -
	fi
done
finish
