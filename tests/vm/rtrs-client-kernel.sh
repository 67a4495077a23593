#!/usr/bin/env bash
# Our rtrs-client against the kernel's rtrs-server + rnbd-server, over
# rdma:// on Soft-RoCE, run inside the VM (the interop contract):
# it writes a random pattern to a brd ram disk the kernel exports, reads it
# back through the server and checks the server's device byte for byte,
# with the kernel server's always_invalidate=Y (rkey_rsp after every IO)
# and =N; then ranges at odd offsets, a partial last sector, bench --verify
# with reads and writes mixed, FUA on each NBD command through rtrs-client
# nbd, and (with xprt-vm -w) two paths on two rxe
# devices with one of them cut while bench --verify runs.
#
#   make tools && tests/vm/xprt-vm -f rtrs -w -- tests/vm/rtrs-client-kernel.sh
#
# Reports TAP ("ok N name" / "not ok N name", the plan at the end), then one
# line "rtrs-client-kernel: PASS (N checks)" or "... FAIL (N of M ...)".  It
# loads the modules it needs itself (any -l works).
# Env: B (build directory, default build), MB (ram disk MiB, default 32),
#      BENCH_TIME (seconds per bench, default 3), INVALIDATE (the server
#      modes to test, default "Y N"), BACK_WAIT (seconds the cut path has to
#      come back, default 90), DEBUG=1 (say what the cut does meanwhile).
# Exit status: 0 when every check passed, 1 otherwise.
set -u
cd "$(dirname "$0")/../.."
B=${B:-build} MB=${MB:-32} BENCH_TIME=${BENCH_TIME:-3}
CLT=$PWD/$B/rtrs-client
T=$(mktemp -d)
# shellcheck source=tap.sh
. tests/vm/tap.sh
finish() {
	rm -rf "$T"
	echo "1..$n"
	if [ $bad -eq 0 ] && [ $n -gt 0 ]; then echo "rtrs-client-kernel: PASS ($n checks)"; exit 0; fi
	echo "rtrs-client-kernel: FAIL ($bad of $n checks failed)"; exit 1
}
bail() { echo "# dmesg:"; dmesg | tail -n 30 | sed 's/^/#   /'; finish; }
dbg() { [ -z "${DEBUG:-}" ] || echo "# debug: $*"; }
no_dir_entries() { [ -z "$(ls -A "$1" 2>/dev/null)" ]; }

if [ -z "${XPRT_VM:-}" ] || [ ! -f "${XPRT_VM_MODDIR:-/nonexistent}/rnbd-server.ko" ]; then
	notok "setup # not inside tests/vm/xprt-vm -f rtrs"; finish
fi
[ -x "$CLT" ] || { notok "setup # no $CLT (make tools first)"; finish; }
IP=$XPRT_VM_IP
echo "# $(uname -r), ${MB} MiB ram disk, $CLT"

rmmod brd 2>/dev/null
check "modprobe brd" modprobe brd rd_nr=1 rd_size=$((MB * 1024)) || bail
DEV=ram0 SIZE=$((MB << 20))

server() {	# Y|N: (re)load the kernel server with always_invalidate=Y|N
	wait_for 100 no_dir_entries /sys/class/rtrs-server/ || return 1
	if [ -d /sys/module/rnbd_server ]; then rmmod rnbd_server || return 1; fi
	if [ -d /sys/module/rtrs_server ]; then rmmod rtrs_server || return 1; fi
	modprobe rtrs-server always_invalidate="$1" && modprobe rnbd-server dev_search_path=/dev &&
		[ "$(cat /sys/module/rtrs_server/parameters/always_invalidate)" = "$1" ]
}
# rtrs-client CMD SESSION ARGS...: one path to the kernel server on rxe0
clt() { local c=$1 s=$2; shift 2; "$CLT" "$c" -s "$s" -p "rdma://$IP" -d "$DEV" -q "$@"; }

head -c "$SIZE" /dev/urandom > "$T/pat"
for inv in ${INVALIDATE-Y N}; do
	check "rtrs-server always_invalidate=$inv, rnbd-server loaded" server $inv || bail
	t="invalidate=$inv"
	s=$SECONDS
	check "$t: write $MB MiB" clt write c$inv < "$T/pat"
	check "$t: the server's /dev/$DEV holds the pattern" \
		cmp "$T/pat" <(dd if=/dev/$DEV bs=1M iflag=direct status=none)
	check "$t: read $MB MiB back identical" cmp "$T/pat" <(clt read c$inv)
	echo "# $t: write + read $((SECONDS - s)) s"
	# a range at an odd offset and length, across request boundaries
	off=1234567 len=345678
	check "$t: read --offset $off --length $len" \
		cmp <(tail -c +$((off + 1)) "$T/pat" | head -c $len) <(clt read c$inv --offset $off --length $len)
	# a write whose last sector is partial keeps the rest of that sector
	head -c 70001 /dev/urandom > "$T/small"
	check "$t: write 70001 bytes at offset 512" clt write c$inv --offset 512 < "$T/small"
	{ head -c 512 "$T/pat"; cat "$T/small"; tail -c +$((512 + 70001 + 1)) "$T/pat"; } > "$T/pat2"
	check "$t: the device has them, and the rest of the last sector" \
		cmp "$T/pat2" <(dd if=/dev/$DEV bs=1M iflag=direct status=none)
	check "$t: bench randrw --verify" into "$T/b.json" clt bench c$inv --rw randrw --bs 16k \
		--iodepth 32 --time "$BENCH_TIME" --size 8M --verify -o json
	if [ -s "$T/b.json" ]; then
		echo "# $t: bench $(json "$T/b.json" 'd["iops"]') IOPS, errors $(json "$T/b.json" 'd["errors"]'), mismatches $(json "$T/b.json" 'd["mismatches"]')"
		check "$t: bench: IO in both directions, no errors or mismatches" \
			jtrue "$T/b.json" 'd["errors"] == 0 and d["mismatches"] == 0 and d["read"]["ios"] > 0 and d["write"]["ios"] > 0'
	fi
	check "$t: bench 128k reads" into "$T/r.json" clt bench c$inv --rw read --bs 128k --iodepth 16 \
		--time 2 -o json
	[ -s "$T/r.json" ] && echo "# $t: 128k reads $(json "$T/r.json" 'round(d["bandwidth_Bps"]/1048576,1)') MiB/s"
	check "$t: no session left on the server" wait_for 100 no_dir_entries /sys/class/rtrs-server/
	check "$t: a missing export is refused" eval \
		"! clt read c$inv-x -d nosuchdev >/dev/null 2>$T/e && grep -q 'nosuchdev: no such export' $T/e"
	head -c "$SIZE" /dev/urandom > "$T/pat"
done

# rtrs-client nbd on the kernel server's device: FUA on each NBD command
# (NBD allows it on all; the kernel's block layer fails any bio but a
# write that carries REQ_FUA, and rnbd-server passes RNBD_F_FUA on)
t=nbd
"$CLT" nbd -s nb -p "rdma://$IP" -d $DEV -q --socket "$T/nb.sock" >"$T/nb.out" 2>"$T/nb.err" &
np=$!
if check "$t: rtrs-client nbd serves the device" wait_for 200 test -s "$T/nb.out"; then
	check "$t: FUA on each command the export offers, each answered 0" \
		into "$T/fua.out" python3 tests/nbd-abuse "unix:$T/nb.sock" $DEV fua 1
	sed 's/^/#   /' "$T/fua.out"
fi
kill -TERM $np 2>/dev/null
wait $np
sed 's/^/#   /' "$T/nb.err"

if [ -n "${XPRT_VM_WIRE_B:-}" ]; then
	# Two paths on two devices: rxe0 (10.200.0.1) and rxb (10.210.0.2).
	t=multipath
	[ "$(cat /sys/module/rnbd_server/parameters/dev_search_path 2>/dev/null)" = /dev ] ||
		check "rtrs-server and rnbd-server loaded" server Y || bail
	two=(-p "rdma://$IP" -p "rdma://$XPRT_VM_WIRE_B")
	check "$t: write over two paths (round-robin)" "$CLT" write -s mp -d $DEV -q "${two[@]}" \
		--policy rr < "$T/pat"
	check "$t: read back over two paths" cmp "$T/pat" <("$CLT" read -s mp -d $DEV -q "${two[@]}")
	# cut the second path during a bench --verify: its requests fail over
	# to the first and nothing is lost; the path comes back by itself once
	# the kernel server has given the old one up (it refuses the same path
	# again until its heartbeat times out: ~30 s).
	"$CLT" bench -s mp2 -d $DEV -q "${two[@]}" --policy rr --rw randrw --bs 8k --iodepth 16 \
		--time 600 --size 4M --verify --reconnect-delay 500 --hb-interval 500 --hb-missed 2 \
		--timeout 5s -o json > "$T/mp.json" 2>"$T/mp.err" &
	bp=$!
	sleep 5
	# the cut: both ends' neighbour entries point at a MAC nobody has, so
	# the wire silently drops everything (no netdev event: taking the
	# link down under the kernel server's IO can hang the guest kernel)
	na=$(ip neigh show "$XPRT_VM_WIRE_B" dev "$XPRT_VM_WIRE_NETDEV_A" | awk '{print $3}')
	nb=$(ip neigh show "$XPRT_VM_WIRE_A" dev "$XPRT_VM_WIRE_NETDEV_B" | awk '{print $3}')
	dbg "cutting ($na, $nb)"
	ip neigh replace "$XPRT_VM_WIRE_B" dev "$XPRT_VM_WIRE_NETDEV_A" lladdr 02:00:00:00:00:0b nud permanent
	ip neigh replace "$XPRT_VM_WIRE_A" dev "$XPRT_VM_WIRE_NETDEV_B" lladdr 02:00:00:00:00:0a nud permanent
	sleep 3
	dbg "restoring"
	unpoison() {	# IP DEV LLADDR: back as it was (no entry: ARP learns it again)
		if [ -n "$3" ]; then ip neigh replace "$1" dev "$2" lladdr "$3" nud permanent
		else ip neigh del "$1" dev "$2"; fi
	}
	unpoison "$XPRT_VM_WIRE_B" "$XPRT_VM_WIRE_NETDEV_A" "$na"
	unpoison "$XPRT_VM_WIRE_A" "$XPRT_VM_WIRE_NETDEV_B" "$nb"
	dbg "restored"
	back() {
		timeout 10 "$CLT" status -s mp2 -o json > "$T/st.json" 2>/dev/null &&
			jtrue "$T/st.json" 'd["paths"][1]["state"] == "connected" and d["paths"][1]["reconnects_ok"] > 0'
	}
	s=$SECONDS end=$((SECONDS + ${BACK_WAIT:-90}))
	while [ $SECONDS -lt $end ] && ! back; do
		dbg "$((SECONDS - s)) s: $(tr -d '\n' < "$T/st.json" | cut -c1-400)"
		sleep 1
	done
	check "$t: the cut path is back by itself" back
	echo "# $t: after $((SECONDS - s)) s: $(json "$T/st.json" '[(p["state"], p["reconnects_ok"], p["reconnects_failed"], p["last_error"]) for p in d["paths"]]' 2>&1 | tail -n 1)"
	sleep 2
	kill -INT $bp
	for ((i = 0; i < 600; i++)); do kill -0 $bp 2>/dev/null || break; sleep 0.1; done
	kill -0 $bp 2>/dev/null && { echo "# $t: bench did not stop on SIGINT"; kill -9 $bp; }
	if wait $bp; then ok "$t: bench --verify while a path is cut"; else
		notok "$t: bench --verify while a path is cut"; sed 's/^/#   /' "$T/mp.err"; fi
	if [ -s "$T/mp.json" ]; then
		echo "# $t: $(json "$T/mp.json" '[(p["uri"], p["state"], p["failovers"], p["reconnects_ok"], p["reconnects_failed"], p["last_error"]) for p in d["paths"]]')"
		check "$t: no errors, no mismatches, requests failed over" jtrue "$T/mp.json" \
			'd["errors"] == 0 and d["mismatches"] == 0 and sum(p["failovers"] for p in d["paths"]) > 0'
	fi
fi

if dmesg | grep -E 'BUG:|WARNING:|Oops|general protection|Call Trace' >"$T/oops"; then
	notok "no kernel BUG/WARNING"; sed 's/^/#   /' "$T/oops" | head -n 40
else
	ok "no kernel BUG/WARNING"
fi
finish
