#!/usr/bin/env bash
# Kernel RNBD smoke test, run inside the VM: the kernel's rnbd-client maps a
# brd and a loop device served by the kernel's rnbd-server over Soft-RoCE,
# writes a random pattern with O_DIRECT, reads it back and checks it both
# through rnbd and on the server's device, with the server's
# always_invalidate on and off; over rxe0 and, with xprt-vm -w, across the
# veth wire (rxa 10.210.0.1 -> rxb 10.210.0.2, checked in wa's counters).
# It proves the harness's rtrs feature (and -w) before our own rtrs-client
# and rtrs-server are tested against the kernel's.
#
#   tests/vm/xprt-vm -f rtrs -w -- tests/vm/kernel-rnbd-smoke.sh
#
# Reports TAP ("ok N name" / "not ok N name", the plan at the end), then one
# line "kernel-rnbd-smoke: PASS (N checks)" or "kernel-rnbd-smoke: FAIL (N of
# M checks failed)".  It loads and reloads the modules it needs itself, so
# any -l works; -p parameters apply unless the test sets the same one.
# A dd that hangs in the kernel fails its check after IO_TIMEOUT s and ends
# the test with rtrs path states, rxe counters and dmesg (see "rxe
# retransmissions" in tests/vm/xprt-vm: keep the VM at 1 vCPU).
# Env: MB (pattern size per device in MiB, default 8),
#      RNBD_PATHS ("plain wire" when -w is on, else "plain"),
#      IO_TIMEOUT (s, default 120).
# Exit status: 0 when every check passed, 1 otherwise.
set -u
MB=${MB:-8}
n=0 bad=0
ok() { n=$((n + 1)); echo "ok $n $*"; }
notok() { n=$((n + 1)) bad=$((bad + 1)); echo "not ok $n $*"; }
check() {	# NAME CMD...: one check
	local name=$1; shift
	if "$@"; then ok "$name"; else notok "$name"; return 1; fi
}
finish() {
	[ $n -gt 0 ] || notok "no checks ran"
	echo "1..$n"
	if [ $bad -eq 0 ]; then
		echo "kernel-rnbd-smoke: PASS ($n checks)"; exit 0
	fi
	echo "kernel-rnbd-smoke: FAIL ($bad of $n checks failed)"
	exit 1
}
bail() {	# after a failed check the rest depends on
	echo "# dmesg:"; dmesg | tail -n 30 | sed 's/^/#   /'
	finish
}
fatal() { notok "$1"; bail; }	# NAME
wait_for() {	# SECONDS CMD...: until CMD succeeds, at most SECONDS (forks are slow
	# under TCG: count time, not tries)
	local end=$((SECONDS + $1))
	until "${@:2}"; do
		[ $SECONDS -lt $end ] || return 1
		sleep 0.2
	done
}
no_dir_entries() { [ -z "$(ls -A "$1" 2>/dev/null)" ]; }
io() {	# NAME CMD...: a check on I/O that may hang in the kernel (D state,
	# deaf to kill): after IO_TIMEOUT s it fails and the test ends with
	# the kernel's view instead of running into the VM's time limit.
	local name=$1 pid end=$((SECONDS + ${IO_TIMEOUT:-120})); shift
	"$@" & pid=$!
	while kill -0 $pid 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.2; done
	if kill -0 $pid 2>/dev/null; then
		notok "$name # hung for ${IO_TIMEOUT:-120} s"
		for f in /sys/class/rtrs-client/*/paths/*/state; do echo "# ${f#/sys/class/}: $(cat "$f")"; done
		for d in /sys/class/infiniband/*/ports/1/hw_counters; do
			echo "# ${d#/sys/class/infiniband/}: $(cd "$d" && grep -H . * | tr '\n' ' ')"
		done
		echo "# netdev drops: $(grep -E 'wa|wb' /proc/net/dev | tr -s ' ' | tr '\n' ' ')"
		echo "# softnet_stat (processed dropped ...): $(tr '\n' ' ' < /proc/net/softnet_stat)"
		trap - EXIT	# losetup -d could wait on the hung device
		bail
	fi
	wait $pid && ok "$name" || { notok "$name"; return 1; }
}

if [ -z "${XPRT_VM:-}" ] || [ ! -f "${XPRT_VM_MODDIR:-/nonexistent}/rnbd-server.ko" ]; then
	notok "setup # not inside tests/vm/xprt-vm -f rtrs"; finish
fi
PATHS=${RNBD_PATHS:-plain${XPRT_VM_WIRE_A:+ wire}}
echo "# $(uname -r), paths: $PATHS, ${MB} MiB per device"

# Block devices to export: one brd ram disk, one loop device over tmpfs.
rmmod brd 2>/dev/null
check "modprobe loop brd rtrs-client rnbd-client" eval \
	'modprobe loop && modprobe brd rd_nr=1 rd_size=$((MB * 1024)) &&
	 modprobe rtrs-client && modprobe rnbd-client' || bail
truncate -s "${MB}M" /tmp/rnbd-backing.img
LOOP=$(losetup -f --show /tmp/rnbd-backing.img) || fatal "losetup"
DEVS="/dev/ram0 $LOOP"
trap 'losetup -d "$LOOP" 2>/dev/null' EXIT

server() {	# Y|N: (re)load the kernel server with always_invalidate=Y|N
	wait_for 20 no_dir_entries /sys/class/rtrs-server/ || return 1
	if [ -d /sys/module/rnbd_server ]; then rmmod rnbd_server || return 1; fi
	if [ -d /sys/module/rtrs_server ]; then rmmod rtrs_server || return 1; fi
	modprobe rtrs-server always_invalidate="$1" && modprobe rnbd-server &&
		[ "$(cat /sys/module/rtrs_server/parameters/always_invalidate)" = "$1" ]
}
map() {	# SESS PATH DEV -> prints the rnbd device name
	local d
	echo "sessname=$1 path=$2 device_path=$3 access_mode=rw" > /sys/class/rnbd-client/ctl/map_device || return 1
	for d in /sys/block/rnbd*; do
		[ "$(cat "$d/rnbd/session" 2>/dev/null)" = "$1" ] &&
			[ "$(cat "$d/rnbd/mapping_path" 2>/dev/null)" = "$3" ] && { echo "${d##*/}"; return 0; }
	done
	return 1
}
cmp_dev() { dd if="$2" of=/tmp/readback bs=1M count="$MB" iflag=direct status=none && cmp "$1" /tmp/readback; }
retransmissions() {	# duplicate requests and retries of every rxe device
	local d
	for d in /sys/class/infiniband/*/ports/1/hw_counters; do
		printf '%s dup %s retry %s  ' "$(echo "$d" | cut -d/ -f5)" \
			"$(cat "$d/duplicate_request")" "$(cat "$d/completer_retry_err")"
	done
}
counter() { cat "/sys/class/net/$1/statistics/$2"; }

for inv in Y N; do
	check "rtrs-server always_invalidate=$inv, rnbd-server loaded" server $inv || bail
	for p in $PATHS; do
		case $p in
		plain) path=ip:$XPRT_VM_IP ;;
		wire) [ -n "${XPRT_VM_WIRE_A:-}" ] || fatal "wire # needs tests/vm/xprt-vm -w"
			path=ip:$XPRT_VM_WIRE_A@ip:$XPRT_VM_WIRE_B
			tx0=$(counter "$XPRT_VM_WIRE_NETDEV_A" tx_bytes) rx0=$(counter "$XPRT_VM_WIRE_NETDEV_A" rx_bytes) ;;
		*) fatal "RNBD_PATHS: unknown path $p" ;;
		esac
		# Both devices on one session; the next session starts only when
		# this one is gone on both sides.
		sess=smoke-$p-$inv rnbds=()
		for dev in $DEVS; do
			t="$p/invalidate=$inv/${dev#/dev/}"
			if rnbd=$(map "$sess" "$path" "$dev") && wait_for 10 test -b "/dev/$rnbd"; then
				ok "$t: map $dev over $path as /dev/$rnbd"; rnbds+=("$rnbd")
			else
				notok "$t: map $dev over $path"; dmesg | tail -n 20 | sed 's/^/#   /'; rnbds+=("")
			fi
		done
		i=0
		for dev in $DEVS; do
			t="$p/invalidate=$inv/${dev#/dev/}" rnbd=${rnbds[i]}; i=$((i + 1))
			[ -n "$rnbd" ] || continue
			head -c "${MB}M" /dev/urandom > /tmp/pat
			s=$SECONDS
			io "$t: write ${MB} MiB (dd oflag=direct)" \
				dd if=/tmp/pat of="/dev/$rnbd" bs=1M oflag=direct status=none
			io "$t: read back identical (dd iflag=direct)" cmp_dev /tmp/pat "/dev/$rnbd"
			io "$t: the server's $dev holds the pattern" cmp_dev /tmp/pat "$dev"
			echo "# $t: $((SECONDS - s)) s"
		done
		for rnbd in "${rnbds[@]}"; do
			[ -n "$rnbd" ] || continue
			check "$p/invalidate=$inv: unmap /dev/$rnbd" eval "echo normal > /sys/block/$rnbd/rnbd/unmap_device"
		done
		check "$p/invalidate=$inv: session closed on both sides" wait_for 20 eval \
			"! test -e /sys/class/rtrs-client/$sess && no_dir_entries /sys/class/rtrs-server/"
		echo "# rxe retransmissions so far: $(retransmissions)"
		if [ "$p" = wire ]; then
			# The client is on wa: what it wrote left there, what it read came in.
			bytes=$((2 * MB << 20))	# two devices
			tx=$(($(counter "$XPRT_VM_WIRE_NETDEV_A" tx_bytes) - tx0)) rx=$(($(counter "$XPRT_VM_WIRE_NETDEV_A" rx_bytes) - rx0))
			check "$p/invalidate=$inv: the data crossed the veth (wa tx $tx, rx $rx bytes)" \
				test $tx -ge $bytes -a $rx -ge $bytes
		fi
	done
done

if dmesg | grep -E 'BUG:|WARNING:|Oops|general protection|Call Trace' >/tmp/oops; then
	notok "no kernel BUG/WARNING"; sed 's/^/#   /' /tmp/oops | head -n 40
else
	ok "no kernel BUG/WARNING"
fi
finish
