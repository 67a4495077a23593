#!/usr/bin/env bash
# Our rtrs-server against the Linux kernel's rnbd-client, over rdma:// on
# Soft-RoCE, inside the VM (the interop contract): the kernel client maps a
# file and a brd ram disk served by rtrs-server, writes a random pattern
# with O_DIRECT, reads it back identical (and finds it in the server's
# backing store), and unmaps cleanly -- with --always-invalidate on and
# off.  Only the client side of the kernel is loaded (rtrs-core,
# rtrs-client, rnbd-client); with xprt-vm -w the second round goes across
# the veth wire (client on rxa 10.210.0.1, server on rxb 10.210.0.2).
#
#   make tools && tests/vm/xprt-vm -f rtrs -l none [-w] -- tests/vm/rtrs-server-kernel.sh
#
# Reports TAP ("ok N name" / "not ok N name", the plan at the end), then
# "rtrs-server-kernel: PASS (N checks)" or "... FAIL (N of M checks failed)".
# Env: RTRS_SERVER (default ${B:-build}/rtrs-server), MB (pattern size,
#      default 32), RTRS_PATHS ("plain wire" with -w, else "plain").
# Exit status: 0 when every check passed, 1 otherwise.
set -u
cd "$(dirname "$0")/../.."
MB=${MB:-32}
SRV=${RTRS_SERVER:-${B:-build}/rtrs-server}
case $SRV in /*) ;; *) SRV=$PWD/$SRV ;; esac
W=$(mktemp -d /tmp/rtrs-server-kernel.XXXXXX) T=$W SRV_PID=
. tests/vm/tap.sh
cleanup() {
	[ -n "$SRV_PID" ] && kill -KILL "$SRV_PID" 2>/dev/null
	rm -rf "$W"
}
trap cleanup EXIT
finish() { tap_finish rtrs-server-kernel; }
bail() {
	echo "# dmesg:"; dmesg | tail -n 30 | sed 's/^/#   /'
	[ -e "$W/srv.err" ] && { echo "# rtrs-server stderr:"; sed 's/^/#   /' "$W/srv.err"; }
	finish
}

if [ -z "${XPRT_VM:-}" ] || [ ! -f "${XPRT_VM_MODDIR:-/nonexistent}/rnbd-client.ko" ]; then
	notok "setup # not inside tests/vm/xprt-vm -f rtrs"; echo "1..$n"; exit 1
fi
[ -x "$SRV" ] || { notok "setup # $SRV not built (make tools)"; echo "1..$n"; exit 1; }
PATHS=${RTRS_PATHS:-plain${XPRT_VM_WIRE_A:+ wire}}
echo "# $(uname -r), paths: $PATHS, ${MB} MiB per device, server $SRV"

# The kernel's server must not be there (it would own port 1234).
rmmod rnbd_server rtrs_server 2>/dev/null
check "modprobe rtrs-client rnbd-client brd (no kernel server)" eval \
	'modprobe rtrs-client && modprobe rnbd-client && modprobe brd rd_nr=1 rd_size=$((MB * 1024)) &&
	 ! test -d /sys/module/rtrs_server' || bail
truncate -s "${MB}M" "$W/disk.img"
head -c "${MB}M" /dev/urandom >"$W/pat"

start_server() {	# ADDR INVAL
	: >"$W/srv.out"
	"$SRV" -l "rdma://$1:1234" -e "file=$W/disk.img" -e ram=/dev/ram0 \
		--always-invalidate "$2" --ctl "$W/ctl.sock" -v >"$W/srv.out" 2>"$W/srv.err" &
	SRV_PID=$!
	wait_for 300 grep -q '^listening ' "$W/srv.out"
}
stop_server() {
	kill -TERM "$SRV_PID" && wait "$SRV_PID"
	local rc=$?
	SRV_PID=
	return $rc
}
map() {	# SESS PATH DEV -> the rnbd device's name
	local d
	echo "sessname=$1 path=$2 device_path=$3 access_mode=rw" >/sys/class/rnbd-client/ctl/map_device ||
		return 1
	for d in /sys/block/rnbd*; do
		[ "$(cat "$d/rnbd/session" 2>/dev/null)" = "$1" ] &&
			[ "$(cat "$d/rnbd/mapping_path" 2>/dev/null)" = "$3" ] && { echo "${d##*/}"; return 0; }
	done
	return 1
}
backing() {	# EXPORT -> where the server keeps it
	case $1 in file) echo "$W/disk.img" ;; ram) echo /dev/ram0 ;; esac
}

for inv in on off; do
	for p in $PATHS; do
		case $p in
		plain) saddr=$XPRT_VM_IP path=ip:$XPRT_VM_IP ;;
		wire) saddr=$XPRT_VM_WIRE_B path=ip:$XPRT_VM_WIRE_A@ip:$XPRT_VM_WIRE_B ;;
		*) notok "RTRS_PATHS: unknown path $p"; continue ;;
		esac
		t="$p/always-invalidate=$inv"
		check "$t: rtrs-server listens on rdma://$saddr:1234" start_server "$saddr" "$inv" || bail
		sess=xs-$p-$inv
		for dev in file ram; do
			if ! rnbd=$(map "$sess" "$path" "$dev"); then
				notok "$t: map $dev"; bail
			fi
			ok "$t: the kernel's rnbd-client maps $dev as /dev/$rnbd"
			wait_for 50 test -b "/dev/$rnbd"
			check "$t/$dev: size is the export's" \
				test "$(blockdev --getsize64 "/dev/$rnbd")" -eq "$((MB << 20))"
			s=$SECONDS
			check "$t/$dev: write ${MB} MiB (dd oflag=direct)" \
				dd if="$W/pat" of="/dev/$rnbd" bs=1M oflag=direct status=none
			check "$t/$dev: read back identical (dd iflag=direct)" \
				cmp "$W/pat" <(dd if="/dev/$rnbd" bs=1M iflag=direct status=none)
			check "$t/$dev: the server's backing store holds it" \
				cmp "$W/pat" <(dd if="$(backing $dev)" bs=1M status=none)
			echo "# $t/$dev: $((SECONDS - s)) s"
			check "$t/$dev: status shows the session and the device" eval \
				"'$SRV' status --ctl '$W/ctl.sock' -o json >'$W/st.json' &&
				 grep -q '\"name\": \"$sess\"' '$W/st.json' &&
				 grep -q '\"export\": \"$dev\"' '$W/st.json' &&
				 grep -q '\"transport\": \"rdma\"' '$W/st.json'"
			check "$t/$dev: unmap" eval "echo normal >/sys/block/$rnbd/rnbd/unmap_device"
		done
		check "$t: the session is gone on both sides" wait_for 100 eval \
			"! test -e /sys/class/rtrs-client/$sess &&
			 '$SRV' status --ctl '$W/ctl.sock' -o json | grep -q '\"sessions\": \[\]'"
		check "$t: no path closed for a fault" eval \
			"! grep -P 'closed: (?!connection lost)' '$W/srv.err'"
		check "$t: rtrs-server exits 0 on SIGTERM" stop_server
		sed 's/^/#   /' "$W/srv.err"
	done
done
rmmod rnbd_client rtrs_client 2>/dev/null
finish
