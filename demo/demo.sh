#!/usr/bin/env bash
# The loopback demo: no configuration, nothing outside this machine.
# Pipes a directory tree through an SHMCM shared-memory connection with tar
# and checks it arrived intact.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build}
MK=$B/mkshmcon
name=demo-$$
work=$(mktemp -d /tmp/xprt-demo.XXXXXX)
cleanup() { "$MK" rm -f "$name" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "mkshmcon: a shared-memory connection, used as a pipe"
echo "\$ mkshmcon create $name"
"$MK" create "$name"

mkdir -p "$work/src" "$work/dst"
cp -r lib cmd man "$work/src/"
head -c $((32 << 20)) /dev/urandom > "$work/src/random.bin"
echo "tree to send: $(find "$work/src" -type f | wc -l) files, $(du -sh "$work/src" | cut -f1)"

echo "\$ mkshmcon connect $name -x b -d | tar x -C dst &"
"$MK" connect "$name" -x b -d | tar x -C "$work/dst" &
rx=$!
echo "\$ tar c -C src . | mkshmcon connect $name -x a"
start=$(date +%s%N)
tar c -C "$work/src" . | "$MK" connect "$name" -x a
wait $rx
ms=$(( ($(date +%s%N) - start) / 1000000 ))
if diff -r "$work/src" "$work/dst" >/dev/null; then
	echo "received intact in ${ms} ms: $(find "$work/dst" -type f | wc -l) files, identical"
else
	echo "MISMATCH between sent and received trees" >&2
	exit 1
fi

step "mkshmcon status $name   (both ends have exited: sides detached)"
"$MK" status "$name"

step "mkshmcon list -o json"
"$MK" list -o json

echo "\$ mkshmcon rm $name"
"$MK" rm "$name"

XP=$B/xprobe
step "xprobe devices   (what this machine can talk over)"
"$XP" devices

step "xprobe: ping and bandwidth over shared memory and TCP"
probe=demo-probe-$$
echo "\$ xprobe serve shm://$probe tcp://127.0.0.1:0 &"
"$XP" serve "shm://$probe" tcp://127.0.0.1:0 >"$work/serve.out" 2>"$work/serve.err" &
srv=$!
trap 'kill $srv 2>/dev/null || true; cleanup' EXIT
for _ in $(seq 100); do
	[ "$(grep -c '^listening' "$work/serve.out" 2>/dev/null)" -ge 2 ] && break
	sleep 0.05
done
tcp=$(sed -n 's/^listening \(tcp:.*\)/\1/p' "$work/serve.out")
echo "\$ xprobe ping shm://$probe -c 5 -i 0.2"
"$XP" ping "shm://$probe" -c 5 -i 0.2
echo "\$ xprobe ping $tcp -c 5 -i 0.2 --prio high"
"$XP" ping "$tcp" -c 5 -i 0.2 --prio high
echo "\$ xprobe bw shm://$probe -T 1 -q"
"$XP" bw "shm://$probe" -T 1 -q
echo "\$ xprobe bw $tcp -T 1 -q"
"$XP" bw "$tcp" -T 1 -q
kill $srv
wait $srv 2>/dev/null || true
IS=$B/ibcache-serve IF=$B/ibcache-fetch
step "ibcache: a file from a peer's page cache, the pages it lacks from the origin"
mkdir -p "$work/origin" "$work/cache"
head -c $((8 << 20)) /dev/urandom > "$work/origin/data.bin"
# the peer's cache: the same file (same size and mtime: the same
# generation) with pages 100-199 missing (a hole)
cp -p "$work/origin/data.bin" "$work/cache/data.bin"
fallocate -p -o $((100 * 4096)) -l $((100 * 4096)) "$work/cache/data.bin"
touch -r "$work/origin/data.bin" "$work/cache/data.bin"
echo "\$ ibcache-serve -e cache -l udp://127.0.0.1:0 &"
"$IS" -e "$work/cache" -l udp://127.0.0.1:0 --ctl "$work/ibc.sock" >"$work/ibc.out" 2>&1 &
isrv=$!
trap 'kill $isrv 2>/dev/null || true; cleanup' EXIT
for _ in $(seq 100); do grep -q '^listening' "$work/ibc.out" && break; sleep 0.05; done
peer=$(sed -n 's/^listening //p' "$work/ibc.out")
echo "\$ ibcache-fetch -p $peer --origin origin/data.bin data.bin --stats > copy.bin"
"$IF" -p "$peer" --origin "$work/origin/data.bin" data.bin --stats >"$work/copy.bin" 2>"$work/ibc.stats"
grep -E '^(peer_pages|origin_pages|requests|short_replies) ' "$work/ibc.stats"
pp=$(awk '$1 == "peer_pages" { print $2 }' "$work/ibc.stats")
op=$(awk '$1 == "origin_pages" { print $2 }' "$work/ibc.stats")
cmp "$work/copy.bin" "$work/origin/data.bin" && echo "byte-exact: $pp pages from the peer, $op from the origin"
echo "\$ ibcache-serve status --ctl ibc.sock"
"$IS" status --ctl "$work/ibc.sock" | grep -E '^(requests|pages_sent|short_replies) '
kill $isrv
wait $isrv 2>/dev/null || true
RS=$B/rtrs-server RC=$B/rtrs-client
step "rtrs: a file served as a block device, read back over two loopback paths"
head -c $((16 << 20)) /dev/urandom > "$work/disk.img"
echo "\$ rtrs-server -l tcp://127.0.0.1:0 -l tcp://127.0.0.2:0 -e disk=disk.img &"
"$RS" -l tcp://127.0.0.1:0 -l tcp://127.0.0.2:0 -e "disk=$work/disk.img" --ctl "$work/rtrs.sock" \
	>"$work/rtrs.out" 2>&1 &
rsrv=$!
trap 'kill $rsrv 2>/dev/null || true; cleanup' EXIT
for _ in $(seq 100); do [ "$(grep -c '^listening' "$work/rtrs.out")" -ge 2 ] && break; sleep 0.05; done
p1=$(sed -n 's/^listening //p' "$work/rtrs.out" | sed -n 1p)
p2=$(sed -n 's/^listening //p' "$work/rtrs.out" | sed -n 2p)
echo "\$ rtrs-client read -s demo -p $p1 -p $p2 -d disk --policy rr > copy.img"
"$RC" read -s demo -p "$p1" -p "$p2" -d disk --policy rr >"$work/copy.img"
cmp "$work/copy.img" "$work/disk.img" && echo "byte-exact: $(stat -c %s "$work/copy.img") bytes over two paths"
echo "\$ rtrs-client bench -s demo -p $p1 -p $p2 -d disk --rw randrw --verify --time 2"
"$RC" bench -s demo -p "$p1" -p "$p2" -d disk --rw randrw --verify --time 2 |
	grep -E '^(iops|bandwidth_Bps|errors|mismatches) |^ *[0-9]+ +tcp|^ *N +URI'
kill $rsrv
wait $rsrv 2>/dev/null || true
printf '\ndemo passed\n'
