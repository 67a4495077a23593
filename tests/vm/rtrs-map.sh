#!/usr/bin/env bash
# rtrs-client map inside the VM, with the kernel's nbd driver: our
# rtrs-server exports a file over two tcp paths; the device is mapped as
# /dev/nbdN and used as a disk -- a file system made, mounted, filled with
# a tree of files, remounted, compared and checked with fsck -n; fio
# writes and verifies while one of the two paths is cut and restored; the
# server is killed (IO fails after --down-timeout, it does not hang) and
# comes back; SIGTERM and unmap let go of the device and leave nothing
# behind; a device mounted (here or in another mount namespace) or used
# as swap is not unmapped without --force; nbd-client
# attaches a device to `rtrs-client nbd`'s export.
#
#   make tools && tests/vm/xprt-vm -l nbd -- tests/vm/rtrs-map.sh
#
# Reports TAP, then "rtrs-map: PASS (N checks)" or "... FAIL (...)".
# Env: B (build directory, default build), MB (file MiB, default 256),
#      FIO_TIME (seconds of each fio run, default 6).
# Exit status: 0 when every check passed, 1 otherwise.
set -u
cd "$(dirname "$0")/../.."
B=${B:-build} MB=${MB:-256} FIO_TIME=${FIO_TIME:-6}
CLT=$PWD/$B/rtrs-client SRV=$PWD/$B/rtrs-server
T=$(mktemp -d)
export XDG_RUNTIME_DIR=$T/run
mkdir -p -m 0700 "$XDG_RUNTIME_DIR"
SRV_PID=
# shellcheck source=tap.sh
. tests/vm/tap.sh
# shellcheck source=map-lib.sh
. tests/vm/map-lib.sh
LOGP=
finish() {
	[ -n "$LOGP" ] && kill "$LOGP" 2>/dev/null && rm -f /dev/log
	umount "$T/mnt" 2>/dev/null
	for d in /sys/block/nbd*; do
		[ -e "$d/pid" ] && "$CLT" unmap --force "/dev/${d##*/}" 2>/dev/null
	done
	[ -n "$SRV_PID" ] && kill "$SRV_PID" 2>/dev/null
	rm -rf "$T"
	echo "1..$n"
	if [ $bad -eq 0 ] && [ $n -gt 0 ]; then echo "rtrs-map: PASS ($n checks)"; exit 0; fi
	echo "rtrs-map: FAIL ($bad of $n checks failed)"; exit 1
}
no_pid() { [ ! -e "/sys/block/$1/pid" ]; }
has_pid() { [ -e "/sys/block/$1/pid" ]; }

if [ -z "${XPRT_VM:-}" ] || [ ! -f "${XPRT_VM_MODDIR:-/nonexistent}/nbd.ko" ]; then
	notok "setup # not inside tests/vm/xprt-vm -l nbd"; finish
fi
for x in "$CLT" "$SRV"; do [ -x "$x" ] || { notok "setup # no $x (make tools first)"; finish; }; done
echo "# $(uname -r), a ${MB} MiB file, $CLT"
modprobe ext4 2>/dev/null
[ -d /sys/module/nbd ] || check "modprobe nbd" modprobe nbd || bail

truncate -s "${MB}M" "$T/disk.img"
check "rtrs-server listens" server || bail
PATHS=(-p tcp://127.0.0.1:1300 -p "tcp://$XPRT_VM_IP:1300")

# --- map, a file system, unmap --------------------------------------------------
check "map prints the device" eval "\"$CLT\" map -s m1 ${PATHS[*]} -d d1 >$T/dev" || bail
DEV=$(cat "$T/dev") NBD=${DEV#/dev/}
echo "# mapped $DEV"
check "the kernel's request timeout is 125 s (60 + 35 + 30)" \
	eval "[ \$(cat /sys/block/$NBD/queue/io_timeout) = 125000 ]"
check "$DEV is a block device of the export's size" \
	eval "[ -b $DEV ] && [ \$(blockdev --getsize64 $DEV) = $((MB << 20)) ]"
check "list-mapped -o json names it, its session, export and paths" eval \
	"\"$CLT\" list-mapped -o json >$T/l.json && jtrue $T/l.json 'len(d[\"mapped\"]) == 1 and d[\"mapped\"][0][\"device\"] == \"$DEV\" and d[\"mapped\"][0][\"session\"] == \"m1\" and d[\"mapped\"][0][\"export\"] == \"d1\" and d[\"mapped\"][0][\"state\"] == \"2/2 paths connected\" and len(d[\"mapped\"][0][\"paths\"]) == 2'"
"$CLT" list-mapped | sed 's/^/# /'
check "status -s m1 shows the map running" eval \
	"\"$CLT\" status -s m1 -o json >$T/s.json && jtrue $T/s.json 'd[\"activity\"] == \"map\"'"
# swap, and a mount only another mount namespace sees: open exclusively,
# not in our mountinfo
check "mkswap, swapon" eval "mkswap -q $DEV >/dev/null && swapon $DEV"
check "unmap refuses a device used as swap" eval \
	"! \"$CLT\" unmap $DEV 2>$T/e && grep -q 'is used as swap (let it go first, or --force)' $T/e"
check "swapoff" swapoff "$DEV"
check "mkfs.ext4" mkfs.ext4 -q -F "$DEV"
mkdir -p "$T/mnt" "$T/tree"
# a tree of files: small, odd-sized, a large one, a hard link and a symlink
for i in $(seq 1 200); do head -c $((RANDOM * 3 + i)) /dev/urandom >"$T/tree/f$i"; done
mkdir -p "$T/tree/sub/deeper"
head -c 20M /dev/urandom >"$T/tree/sub/deeper/big"
ln "$T/tree/f1" "$T/tree/sub/hard"
ln -s ../f2 "$T/tree/sub/soft"
check "mount" mount -t ext4 "$DEV" "$T/mnt"
check "copy a tree of files in" cp -a "$T/tree" "$T/mnt/"
check "unmap refuses a mounted device" eval \
	"! \"$CLT\" unmap $DEV 2>$T/e && grep -q 'is mounted on $T/mnt (unmount it first, or --force)' $T/e"
check "umount" umount "$T/mnt"
unshare -m --propagation private sh -c 'mount -t ext4 "$1" "$2" && echo mounted && exec sleep 60' \
	sh "$DEV" "$T/mnt" >"$T/ns.out" 2>&1 &
NSP=$!
check "mounted in a mount namespace of its own" wait_for 100 grep -q mounted "$T/ns.out"
check "unmap refuses a device mounted in another namespace" eval \
	"! \"$CLT\" unmap $DEV 2>$T/e && grep -q 'is open exclusively elsewhere' $T/e"
kill "$NSP"
wait "$NSP" 2>/dev/null
check "the namespace's mount let go of it" wait_for 100 \
	python3 -c 'import os,sys; os.close(os.open(sys.argv[1], os.O_RDONLY | os.O_EXCL))' "$DEV"
check "fsck.ext4 -n: clean" fsck.ext4 -n -f "$DEV"
check "mount again" mount -t ext4 "$DEV" "$T/mnt"
check "the tree is the same" diff -r "$T/tree" "$T/mnt/tree"
check "umount" umount "$T/mnt"
PID=$(cat "/sys/block/$NBD/pid")
check "unmap by session" "$CLT" unmap m1
check "the serving process is gone" wait_for 50 gone "$PID"
check "the device has no server any more" no_pid "$NBD"
check "list-mapped is empty" eval "\"$CLT\" list-mapped -o json >$T/l.json && jtrue $T/l.json 'd[\"mapped\"] == []'"
check "no control socket is left" eval "[ -z \"\$(ls $XDG_RUNTIME_DIR/xprt 2>/dev/null)\" ]"

# --- the data survive a remap ---------------------------------------------------
check "map again, --nbd-device $DEV, 4 NBD connections" eval \
	"\"$CLT\" map -s m2 ${PATHS[*]} -d d1 --nbd-device $DEV --nbd-connections 4 >$T/dev2 && [ \$(cat $T/dev2) = $DEV ]"
check "mount the remapped device" mount -t ext4 "$DEV" "$T/mnt"
check "the tree is still the same" diff -r "$T/tree" "$T/mnt/tree"
check "umount" umount "$T/mnt"
fio_verify "$DEV" " over 4 connections"
PID=$(cat "/sys/block/$NBD/pid")
check "SIGTERM: the map unmaps itself" kill -TERM "$PID"
check "its process ends" wait_for 100 gone "$PID"
check "the device is let go" wait_for 50 no_pid "$NBD"

# --- --foreground under systemd (Type=notify) -------------------------------------
python3 -c 'import socket,sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.bind(sys.argv[1]); s.settimeout(30)
print(s.recv(200).decode())' "$T/notify" >"$T/notified" &
NP=$!
wait_for 50 test -S "$T/notify"
NOTIFY_SOCKET=$T/notify "$CLT" map --foreground -s m6 "${PATHS[@]}" -d d1 >"$T/fg.out" 2>"$T/fg.err" &
FGP=$!
check "--foreground: READY=1 on NOTIFY_SOCKET once mapped" eval "wait $NP && grep -q '^READY=1' $T/notified"
check "--foreground: the device on stdout" eval "grep -q '^/dev/nbd[0-9]*$' $T/fg.out"
DEV=$(cat "$T/fg.out") NBD=${DEV#/dev/}
check "--foreground: SIGTERM unmaps, exit 0" eval "kill -TERM $FGP && wait $FGP"
check "the device is let go" wait_for 50 no_pid "$NBD"
# unmap of a --foreground map whose parent (this shell) reaps it only later
"$CLT" map --foreground -s m8 "${PATHS[@]}" -d d1 >"$T/fg8.out" 2>"$T/fg8.err" &
FGP=$!
check "--foreground map m8" wait_for 200 grep -q '^/dev/nbd' "$T/fg8.out"
DEV=$(cat "$T/fg8.out") NBD=${DEV#/dev/}
s0=$SECONDS
check "unmap returns once its unreaped process has ended" "$CLT" unmap "$DEV"
check "... at once, not after its 30 s limit" eval "[ \$((SECONDS - s0)) -lt 10 ]"
check "its exit status is 0" wait "$FGP"

# --- map's output captured whole; SIGTERM while the kernel is busy ----------------
check "map's output and errors captured by \$(... 2>&1) come back at once" eval \
	"timeout 20 bash -c 'x=\$(\"$CLT\" map -s m7 ${PATHS[*]} -d d1 2>&1) && echo \$x' >$T/dev7"
DEV=$(cat "$T/dev7") NBD=${DEV#/dev/}
check "it is a device" test -b "$DEV"
term_under_load "$DEV" "$(cat "/sys/block/$NBD/pid")" no_pid "$NBD"

# --- a path cut under fio --------------------------------------------------------
check "map m3" eval "\"$CLT\" map -s m3 ${PATHS[*]} -d d1 --policy rr --reconnect-delay 200 >$T/dev3"
DEV=$(cat "$T/dev3") NBD=${DEV#/dev/}
cut_under_fio "$DEV" m3
check "unmap $DEV" "$CLT" unmap "$DEV"
check "the device is let go" wait_for 50 no_pid "$NBD"

# --- the server dies: IO errors, not a hang; it comes back ----------------------
# a detached map says what happens to syslog: nothing listens on /dev/log
# in the VM, so this does
if [ ! -e /dev/log ]; then
	python3 -c 'import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("/dev/log")
f = open(sys.argv[1], "ab", buffering=0)
while True:
    f.write(s.recv(4096) + b"\n")' "$T/syslog" &
	LOGP=$!
	check "a listener on /dev/log" wait_for 50 test -S /dev/log
fi
check "map m4 with --down-timeout 2" eval \
	"\"$CLT\" map -s m4 -p tcp://127.0.0.1:1300 -d d1 --down-timeout 2 --reconnect-delay 200 --hb-interval 200 --hb-missed 2 >$T/dev4"
DEV=$(cat "$T/dev4") NBD=${DEV#/dev/}
# the kernel's request timeout: down-timeout 2 s + heartbeats 0.2 s x (2 + 2),
# rounded up, + 30 s; `set --down-timeout` sets it again
io_timeout() { [ "$(cat "/sys/block/$NBD/queue/io_timeout")" = "$1" ]; }
check "the kernel's request timeout is 33 s" io_timeout 33000
check "set --down-timeout 10" "$CLT" set -s m4 --down-timeout 10
check "... makes it 41 s" wait_for 30 io_timeout 41000
check "set --down-timeout 2" "$CLT" set -s m4 --down-timeout 2
check "... makes it 33 s again" wait_for 30 io_timeout 33000
server_dies "$DEV" m4 40
if [ -n "$LOGP" ]; then
	check "syslog has the detached map's 'all paths down'" \
		wait_for 50 grep -q "rtrs-client\[[0-9]*\]: rtrs-client map: all paths to m4 are down" "$T/syslog"
	check "... and 'connected again'" \
		wait_for 50 grep -q "rtrs-client map: session m4 is connected again" "$T/syslog"
fi
PID=$(cat "/sys/block/$NBD/pid")
check "unmap $DEV" "$CLT" unmap "$DEV"
check "its process ends" wait_for 50 gone "$PID"

# --- nbd-client (the NBD project's own) on rtrs-client nbd's export -------------
if command -v nbd-client >/dev/null; then
	"$CLT" nbd -s n9 -p tcp://127.0.0.1:1300 -d d1 --access ro --socket "$T/n9.sock" \
		>"$T/n9.out" 2>"$T/n9.err" &
	NP9=$!
	wait_for 100 test -s "$T/n9.out"
	check "nbd-client attaches /dev/nbd9 to the export over its unix socket" \
		nbd-client -N d1 -unix "$T/n9.sock" /dev/nbd9
	check "/dev/nbd9 reads the file byte for byte" eval \
		"cmp <(dd if=/dev/nbd9 bs=1M count=16 iflag=direct status=none) <(head -c 16M $T/disk.img)"
	check "... and is read-only" eval "[ \$(blockdev --getro /dev/nbd9) = 1 ]"
	check "nbd-client -d detaches it" nbd-client -d /dev/nbd9
	check "the export's process serves on" kill -0 "$NP9"
	kill "$NP9"
	check "and ends on SIGTERM" wait "$NP9"
else
	notok "nbd-client is not installed (scripts/install-deps)"
fi

# --- a map with a control socket of its own: list-mapped finds it all the same --
check "map m8 --ctl $T/m8.sock" eval \
	"\"$CLT\" map -s m8 -p tcp://127.0.0.1:1300 -d d1 --access ro --ctl $T/m8.sock >$T/dev8"
DEV=$(cat "$T/dev8") NBD=${DEV#/dev/}
check "list-mapped shows its paths through that socket" eval \
	"\"$CLT\" list-mapped -o json >$T/l8.json && jtrue $T/l8.json '[m[\"state\"] for m in d[\"mapped\"] if m[\"session\"] == \"m8\"] == [\"1/1 paths connected\"]'"
check "unmap $DEV" "$CLT" unmap "$DEV"
check "the device is let go" wait_for 50 no_pid "$NBD"

# --- the serving process killed: the kernel fails IO; unmap cleans up ------------
check "map m5" eval "\"$CLT\" map -s m5 -p tcp://127.0.0.1:1300 -d d1 >$T/dev5"
DEV=$(cat "$T/dev5") NBD=${DEV#/dev/}
PID=$(cat "/sys/block/$NBD/pid")
kill -9 "$PID"
check "IO on a device whose server was killed fails, it does not hang" eval \
	"! timeout 60 dd if=$DEV of=/dev/null bs=4k count=1 skip=999 iflag=direct 2>/dev/null"
if has_pid "$NBD"; then
	check "unmap --force lets go of it" "$CLT" unmap --force "$DEV"
	check "the device is let go" wait_for 50 no_pid "$NBD"
fi
finish
