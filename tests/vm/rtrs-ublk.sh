#!/usr/bin/env bash
# rtrs-client map --ublk inside the VM, with the kernel's ublk driver
# (Linux 6.12: Debian 12's 6.1 does not build it): our rtrs-server exports
# a file over two tcp paths; the device is mapped as /dev/ublkbN and used
# as a disk -- byte-exact against the backing file, a file system made,
# filled, remounted and checked; fio writes and verifies while one path is
# cut and restored; discard and write-zeroes reach the file; the server
# is killed (IO fails after --down-timeout, it does not hang); SIGTERM,
# unmap and a killed serving process leave no disk behind.
#
#   make tools && XPRT_VM_KPKG=linux-image-6.12-amd64 \
#       tests/vm/xprt-vm -l "ublk_drv nbd" -- tests/vm/rtrs-ublk.sh
#
# Reports TAP, then "rtrs-ublk: PASS (N checks)" or "... FAIL (...)".
# Env: B (build directory, default build), MB (file MiB, default 256),
#      FIO_TIME (seconds of the fio run across the cut, default 6).
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
finish() {
	umount "$T/mnt" 2>/dev/null
	for f in /run/xprt/ublk/ublkb*; do
		[ -e "$f" ] && "$CLT" unmap --force "/dev/${f##*/}" 2>/dev/null
	done
	for d in /sys/block/nbd*; do
		[ -e "$d/pid" ] && "$CLT" unmap --force "/dev/${d##*/}" 2>/dev/null
	done
	[ -n "$SRV_PID" ] && kill "$SRV_PID" 2>/dev/null
	rm -rf "$T"
	echo "1..$n"
	if [ $bad -eq 0 ] && [ $n -gt 0 ]; then echo "rtrs-ublk: PASS ($n checks)"; exit 0; fi
	echo "rtrs-ublk: FAIL ($bad of $n checks failed)"; exit 1
}
no_disk() { [ ! -e "/sys/block/$1" ]; }

if [ -z "${XPRT_VM:-}" ] || [ ! -f "${XPRT_VM_MODDIR:-/nonexistent}/ublk_drv.ko" ]; then
	notok "setup # not inside XPRT_VM_KPKG=linux-image-6.12-amd64 tests/vm/xprt-vm -l \"ublk_drv nbd\""
	finish
fi
for x in "$CLT" "$SRV"; do [ -x "$x" ] || { notok "setup # no $x (make tools first)"; finish; }; done
echo "# $(uname -r), a ${MB} MiB file, $CLT"
modprobe ext4 2>/dev/null
check "/dev/ublk-control" test -c /dev/ublk-control || bail

head -c $((MB << 20)) /dev/urandom >"$T/disk.img"
check "rtrs-server listens" server || bail
PATHS=(-p tcp://127.0.0.1:1300 -p "tcp://$XPRT_VM_IP:1300")

# --- map, the bytes, a file system, unmap ----------------------------------------
check "map --ublk prints the device" eval "\"$CLT\" map --ublk -s u1 ${PATHS[*]} -d d1 >$T/dev" || bail
DEV=$(cat "$T/dev") UB=${DEV#/dev/}
echo "# mapped $DEV"
check "$DEV is a block device of the export's size" \
	eval "[ -b $DEV ] && [ \$(blockdev --getsize64 $DEV) = $((MB << 20)) ]"
check "list-mapped -o json names it (kind ublk), its session, export and paths" eval \
	"\"$CLT\" list-mapped -o json >$T/l.json && jtrue $T/l.json 'len(d[\"mapped\"]) == 1 and d[\"mapped\"][0][\"device\"] == \"$DEV\" and d[\"mapped\"][0][\"kind\"] == \"ublk\" and d[\"mapped\"][0][\"session\"] == \"u1\" and d[\"mapped\"][0][\"export\"] == \"d1\" and d[\"mapped\"][0][\"state\"] == \"2/2 paths connected\"'"
"$CLT" list-mapped | sed 's/^/# /'
check "status -s u1 shows the map and its queue" eval \
	"\"$CLT\" status -s u1 -o json >$T/s.json && jtrue $T/s.json 'd[\"activity\"] == \"map\" and d[\"ublk\"][\"device\"] == \"$DEV\"'"
check "the whole device reads back as the file, byte for byte (1 MiB direct reads)" \
	cmp <(dd if="$DEV" bs=1M iflag=direct status=none) "$T/disk.img"
# random writes of random sizes at random places, each checked in the file
seed=${XPRT_SEED:-$RANDOM}
echo "# random writes: seed $seed (XPRT_SEED=$seed repeats)"
python3 - "$DEV" "$T/disk.img" "$seed" >"$T/rw.out" 2>&1 <<'PY'
import mmap, os, random, sys
dev, img, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rnd = random.Random(seed)
size = os.path.getsize(img)
fd = os.open(dev, os.O_RDWR | os.O_DIRECT)
buf = mmap.mmap(-1, 4 << 20)
bad = 0
for i in range(200):
    n = rnd.choice([512, 4096, 8192, 65536, 1 << 20, 3 << 20]) // 512 * 512
    off = rnd.randrange(0, (size - n) // 512) * 512
    data = rnd.randbytes(n)
    buf[:n] = data
    if os.pwritev(fd, [memoryview(buf)[:n]], off) != n:
        bad += 1
    with open(img, 'rb') as f:
        f.seek(off)
        if f.read(n) != data:
            print("mismatch at", off, n); bad += 1
os.close(fd)
sys.exit(1 if bad else 0)
PY
rc=$?
check "200 random direct writes (512 B to 3 MiB) land in the file exactly" eval \
	"[ $rc -eq 0 ] || { cat $T/rw.out >&2; false; }"
check "mkfs.ext4" mkfs.ext4 -q -F "$DEV"
mkdir -p "$T/mnt" "$T/tree/sub"
for i in $(seq 1 150); do head -c $((RANDOM * 3 + i)) /dev/urandom >"$T/tree/f$i"; done
head -c 20M /dev/urandom >"$T/tree/sub/big"
check "mount" mount -t ext4 "$DEV" "$T/mnt"
check "copy a tree of files in" cp -a "$T/tree" "$T/mnt/"
check "unmap refuses a mounted device" eval \
	"! \"$CLT\" unmap $DEV 2>$T/e && grep -q 'is mounted on $T/mnt (unmount it first, or --force)' $T/e"
check "umount" umount "$T/mnt"
check "fsck.ext4 -n: clean" fsck.ext4 -n -f "$DEV"
check "mount again" mount -t ext4 "$DEV" "$T/mnt"
check "the tree is the same" diff -r "$T/tree" "$T/mnt/tree"
check "umount" umount "$T/mnt"
PID=$(awk '{print $1}' "/run/xprt/ublk/$UB")
check "unmap by session" "$CLT" unmap u1
check "the serving process is gone" wait_for 50 gone "$PID"
check "the disk is gone" no_disk "$UB"
check "the char device is gone" eval "[ ! -e /dev/ublkc${UB#ublkb} ]"
check "the record is gone" eval "[ ! -e /run/xprt/ublk/$UB ]"
check "list-mapped is empty" eval "\"$CLT\" list-mapped -o json >$T/l.json && jtrue $T/l.json 'd[\"mapped\"] == []'"

# --- the data survive a remap; discard and write-zeroes ---------------------------
check "map again with --ublk=7" eval \
	"\"$CLT\" map --ublk=7 -s u2 ${PATHS[*]} -d d1 >$T/dev2 && [ \$(cat $T/dev2) = /dev/ublkb7 ]"
DEV=/dev/ublkb7 UB=ublkb7
check "mount the remapped device" mount -t ext4 "$DEV" "$T/mnt"
check "the tree is still the same" diff -r "$T/tree" "$T/mnt/tree"
check "umount" umount "$T/mnt"
check "blkdiscard -z (write zeroes) of 4 MiB at 64 MiB: zeros in the file" eval \
	"blkdiscard -z -o $((64 << 20)) -l $((4 << 20)) $DEV && cmp -n $((4 << 20)) -i $((64 << 20)):0 $T/disk.img /dev/zero"
check "a second map of the same id is refused, one line" eval \
	"! \"$CLT\" map --ublk=7 -s u9 ${PATHS[*]} -d d1 --access ro 2>$T/e >/dev/null && [ \$(wc -l <$T/e) = 1 ] && grep -q 'id is taken' $T/e"
fio_verify "$DEV" ""
PID=$(awk '{print $1}' "/run/xprt/ublk/$UB")
check "SIGTERM: the map unmaps itself" kill -TERM "$PID"
check "its process ends" wait_for 100 gone "$PID"
check "the disk is gone" wait_for 50 no_disk "$UB"

# --- what the page cache holds goes out when the device stops --------------------
check "map u8" eval "\"$CLT\" map --ublk -s u8 ${PATHS[*]} -d d1 >$T/dev8"
DEV=$(cat "$T/dev8") UB=${DEV#/dev/}
head -c 8M /dev/urandom >"$T/cached"
check "8 MiB written through the page cache, no sync" \
	dd if="$T/cached" of="$DEV" bs=1M seek=100 status=none
check "unmap: the device writes back its dirty pages first" "$CLT" unmap "$DEV"
check "the file has them" cmp -n $((8 << 20)) -i $((100 << 20)):0 "$T/disk.img" "$T/cached"

# --- a partition mounted ----------------------------------------------------------
check "map u9" eval "\"$CLT\" map --ublk -s u9 ${PATHS[*]} -d d1 >$T/dev9"
DEV=$(cat "$T/dev9") UB=${DEV#/dev/}
# an MBR with one Linux partition, sectors 2048..67583, and a re-read
mbr() { python3 -c 'import struct,sys
e = struct.pack("<B3sB3sII", 0, b"\0\0\0", 0x83, b"\0\0\0", 2048, 65536)
sys.stdout.buffer.write(bytes(446) + e + bytes(48) + b"\x55\xaa")'; }
check "a partition table with one partition" eval \
	"mbr | dd of=$DEV bs=512 count=1 oflag=direct status=none && blockdev --rereadpt $DEV"
check "${DEV}p1 appears" wait_for 50 test -b "${DEV}p1"
check "mkfs.ext4 on it, mount" eval "mkfs.ext4 -q -F ${DEV}p1 && mount ${DEV}p1 $T/mnt"
check "unmap refuses: the partition is mounted" eval \
	"! \"$CLT\" unmap $DEV 2>$T/e && grep -q 'is mounted on $T/mnt (unmount it first, or --force)' $T/e"
check "umount; unmap" eval "umount $T/mnt && \"$CLT\" unmap $DEV"
check "the disk is gone" wait_for 50 no_disk "$UB"

# --- --foreground: exit status, standard error ------------------------------------
"$CLT" map --ublk --foreground -s u10 "${PATHS[@]}" -d d1 >"$T/fg.out" 2>"$T/fg.err" &
FGP=$!
check "--foreground: the device on stdout" wait_for 100 grep -q '^/dev/ublkb[0-9]*$' "$T/fg.out"
DEV=$(cat "$T/fg.out") UB=${DEV#/dev/}
check "fio randrw with verify" fio --name=fg --filename="$DEV" --direct=1 --ioengine=libaio \
	--rw=randrw --bs=16k --iodepth=64 --size=32M --verify=crc32c --verify_state_save=0 \
	--verify_fatal=1 --output="$T/fio-fg.out"
check "--foreground: SIGTERM unmaps, exit 0, nothing on stderr" eval \
	"kill -TERM $FGP && wait $FGP && [ ! -s $T/fg.err ]"
cat "$T/fg.err" | sed 's/^/#   /'
check "the disk is gone" wait_for 50 no_disk "$UB"
"$CLT" map --ublk --foreground -s u11 "${PATHS[@]}" -d d1 >"$T/fg2.out" 2>"$T/fg2.err" &
FGP=$!
wait_for 100 grep -q '^/dev/ublkb' "$T/fg2.out"
DEV=$(cat "$T/fg2.out") UB=${DEV#/dev/}
fio --name=stuck --filename="$DEV" --direct=1 --ioengine=libaio --rw=randwrite --bs=64k \
	--iodepth=64 --size=64M --time_based --runtime=60 >/dev/null 2>&1 &
FP=$!
sleep 2
kill -STOP "$SRV_PID"
sleep 1
kill -INT "$FGP"; sleep 1; kill -INT "$FGP"
rc=0; timeout 60 tail --pid="$FGP" -f /dev/null || rc=124
wait "$FGP"; rc=$((rc ? rc : $?))
kill -CONT "$SRV_PID"
check "server stopped, two SIGINTs: the map gives up, exit 1 (not a crash: $rc)" [ "$rc" = 1 ]
check "one line says requests were abandoned" eval \
	"[ \$(wc -l <$T/fg2.err) = 1 ] && grep -q 'requests at the server: interrupted' $T/fg2.err"
sed 's/^/#   /' "$T/fg2.err"
check "the disk and the char device are gone" eval \
	"wait_for 50 no_disk $UB && [ ! -e /dev/ublkc${UB#ublkb} ]"
kill "$FP" 2>/dev/null; wait "$FP" 2>/dev/null
check "the server serves again" wait_for 100 eval \
	"\"$CLT\" read -s r1 -p tcp://127.0.0.1:1300 -d d1 --length 4096 >/dev/null"

# --- several at once, beside an NBD map --------------------------------------------
check "map --ublk ua (rw) and ub (ro), map nbd nc (ro), all of d1" eval \
	"\"$CLT\" map --ublk -s ua ${PATHS[*]} -d d1 >$T/da && \"$CLT\" map --ublk -s ub -p tcp://127.0.0.1:1300 -d d1 --access ro >$T/db && \"$CLT\" map -s nc -p tcp://127.0.0.1:1300 -d d1 --access ro >$T/dc"
DA=$(cat "$T/da") DB=$(cat "$T/db") DC=$(cat "$T/dc")
check "list-mapped: the nbd device first, then both ublk ones in order" eval \
	"\"$CLT\" list-mapped -o json >$T/l.json && jtrue $T/l.json '[(m[\"device\"], m[\"kind\"], m[\"session\"]) for m in d[\"mapped\"]] == [(\"$DC\", \"nbd\", \"nc\"), (\"$DA\", \"ublk\", \"ua\"), (\"$DB\", \"ublk\", \"ub\")]'"
check "a write through $DA reads back through $DB and $DC" eval \
	"head -c 1M /dev/urandom >$T/x && dd if=$T/x of=$DA bs=1M seek=200 oflag=direct status=none && cmp $T/x <(dd if=$DB bs=1M skip=200 count=1 iflag=direct status=none) && cmp $T/x <(dd if=$DC bs=1M skip=200 count=1 iflag=direct status=none)"
check "unmap ub by session leaves the others" eval \
	"\"$CLT\" unmap ub && wait_for 50 no_disk ${DB#/dev/} && [ -b $DA ] && \"$CLT\" list-mapped -o json >$T/l.json && jtrue $T/l.json 'len(d[\"mapped\"]) == 2'"
check "unmap the other two" eval "\"$CLT\" unmap $DA && \"$CLT\" unmap $DC && wait_for 50 no_disk ${DA#/dev/}"

# --- read-only ------------------------------------------------------------------
check "map --ublk --access ro" eval "\"$CLT\" map --ublk -s u3 ${PATHS[*]} -d d1 --access ro >$T/dev3"
DEV=$(cat "$T/dev3") UB=${DEV#/dev/}
check "the kernel sees it read-only" eval "[ \$(blockdev --getro $DEV) = 1 ]"
check "a write is refused" eval "! dd if=/dev/zero of=$DEV bs=4k count=1 oflag=direct 2>/dev/null"
check "unmap $DEV" "$CLT" unmap "$DEV"
check "the disk is gone" wait_for 50 no_disk "$UB"

# --- SIGTERM under a full queue; a path cut under fio -----------------------------
check "map u4" eval "\"$CLT\" map --ublk -s u4 ${PATHS[*]} -d d1 >$T/dev4"
DEV=$(cat "$T/dev4") UB=${DEV#/dev/}
term_under_load "$DEV" "$(awk '{print $1}' "/run/xprt/ublk/$UB")" no_disk "$UB"

check "map u5" eval "\"$CLT\" map --ublk -s u5 ${PATHS[*]} -d d1 --policy rr --reconnect-delay 200 >$T/dev5"
DEV=$(cat "$T/dev5") UB=${DEV#/dev/}
cut_under_fio "$DEV" u5
check "unmap $DEV" "$CLT" unmap "$DEV"
check "the disk is gone" wait_for 50 no_disk "$UB"

# --- the server dies: IO errors, not a hang ---------------------------------------
check "map u6 with --down-timeout 2" eval \
	"\"$CLT\" map --ublk -s u6 -p tcp://127.0.0.1:1300 -d d1 --down-timeout 2 --reconnect-delay 200 --hb-interval 200 --hb-missed 2 >$T/dev6"
DEV=$(cat "$T/dev6") UB=${DEV#/dev/}
server_dies "$DEV" u6 30
check "unmap $DEV" "$CLT" unmap "$DEV"
check "the disk is gone" wait_for 50 no_disk "$UB"

# --- the serving process killed: the driver removes the disk ----------------------
check "map u7" eval "\"$CLT\" map --ublk -s u7 -p tcp://127.0.0.1:1300 -d d1 >$T/dev7"
DEV=$(cat "$T/dev7") UB=${DEV#/dev/}
PID=$(awk '{print $1}' "/run/xprt/ublk/$UB")
kill -9 "$PID"
check "the disk goes with its server" wait_for 100 no_disk "$UB"
check "list-mapped does not show it" eval "\"$CLT\" list-mapped -o json >$T/l.json && jtrue $T/l.json 'd[\"mapped\"] == []'"
check "its char device is left (the driver keeps the id until it is deleted)" test -e "/dev/ublkc${UB#ublkb}"
check "map --ublk=${UB#ublkb} onto it: refused, unmap named" eval \
	"! \"$CLT\" map --ublk=${UB#ublkb} -s u12 -p tcp://127.0.0.1:1300 -d d1 2>$T/e >/dev/null && grep -q 'goes with unmap' $T/e"
check "unmap deletes it, saying its process had ended" eval \
	"\"$CLT\" unmap $DEV 2>$T/e && grep -q 'serving process $PID had ended' $T/e"
check "the char device and the record are gone" eval \
	"[ ! -e /dev/ublkc${UB#ublkb} ] && [ ! -e /run/xprt/ublk/$UB ]"
check "unmap again: not mapped" eval "! \"$CLT\" unmap $DEV 2>$T/e && grep -q 'is not mapped by rtrs-client' $T/e"
check "no kernel BUG/WARNING" eval "! dmesg | grep -E 'BUG:|WARNING:|Oops|general protection|Call Trace' >&2"
finish
