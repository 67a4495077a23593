# Helpers for the ibcache bats tests (same style as xprobe_helpers.bash):
# every wait is bounded, teardown kills what a test started.
#
# Point the tests at another build with IBCACHE_SERVE=build-san/ibcache-serve
# IBCACHE_FETCH=build-san/ibcache-fetch.

IBCACHE_SERVE=${IBCACHE_SERVE:-$BATS_TEST_DIRNAME/../../build/ibcache-serve}
IBCACHE_FETCH=${IBCACHE_FETCH:-$BATS_TEST_DIRNAME/../../build/ibcache-fetch}
case $IBCACHE_SERVE in /*) ;; *) IBCACHE_SERVE=$PWD/$IBCACHE_SERVE ;; esac
case $IBCACHE_FETCH in /*) ;; *) IBCACHE_FETCH=$PWD/$IBCACHE_FETCH ;; esac

BG_PIDS=()

# shellcheck source=common.bash
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

setup() {
	[ -x "$IBCACHE_SERVE" ] || die "$IBCACHE_SERVE is not built (run make)"
	[ -x "$IBCACHE_FETCH" ] || die "$IBCACHE_FETCH is not built (run make)"
	BG_PIDS=()
	EXP=$BATS_TEST_TMPDIR/export	# what the peer serves
	ORG=$BATS_TEST_TMPDIR/origin	# the origin's copies
	mkdir -p "$EXP" "$ORG"
	SRV_N=0
}

teardown() {
	kill_bg
	[ "$(type -t netns_teardown)" = function ] && netns_teardown
	return 0
}

# fetch_held DIR ARGS...: ibcache-fetch ARGS in the background, its output
# read by a reader that takes the first 4096 bytes, makes DIR/started,
# then waits for DIR/go before it reads the rest: the fetch has its size
# and its first chunk, and is held meanwhile.  Its stdout goes to DIR/o,
# stderr to DIR/err, its exit status to DIR/rc; sets HELD_PID (the
# pipeline) once DIR/started is there.
fetch_held() {
	local d=$1 i
	shift
	rm -f "$d/started" "$d/go"
	{ rc=0; "$F" "$@" 2>"$d/err" || rc=$?; echo $rc >"$d/rc"; } |
		python3 -c 'import os, sys, time
first = sys.stdin.buffer.read(4096)
open(sys.argv[1], "w").close()
while not os.path.exists(sys.argv[2]): time.sleep(0.01)
sys.stdout.buffer.write(first + sys.stdin.buffer.read())' "$d/started" "$d/go" >"$d/o" &
	HELD_PID=$!
	BG_PIDS+=($HELD_PID)
	for i in $(seq 1000); do [ -e "$d/started" ] && return 0; sleep 0.01; done
	die "the fetch wrote nothing"
}

# mkdata NAME BYTES: random contents at $ORG/NAME, and the same bytes with
# the same mtime at $EXP/NAME (so the same generation).
mkdata() {
	mkdir -p "$(dirname "$ORG/$1")" "$(dirname "$EXP/$1")"
	head -c "$2" /dev/urandom >"$ORG/$1"
	cp -p "$ORG/$1" "$EXP/$1"
}

# sparse_copy SRC DST PAGE...: DST has SRC's size and mtime, and only the
# listed pages' bytes (4 KiB pages; "N-M" ranges allowed): the others are
# holes, pages a cache does not have.
sparse_copy() {
	local src=$1 dst=$2
	shift 2
	mkdir -p "$(dirname "$dst")"
	python3 - "$src" "$dst" "$@" <<-'EOF'
	import os, sys
	src, dst, spec = sys.argv[1], sys.argv[2], sys.argv[3:]
	size = os.path.getsize(src)
	pages = set()
	for s in spec:
	    a, _, b = s.partition("-")
	    pages.update(range(int(a), int(b or a) + 1))
	with open(src, "rb") as f, open(dst, "wb") as g:
	    g.truncate(size)
	    for p in sorted(pages):
	        f.seek(p * 4096); g.seek(p * 4096); g.write(f.read(4096))
	st = os.stat(src)
	os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
	EOF
}

# tag_gen GEN FILE...: the generation tag user.ibcache.gen on each FILE;
# the test is skipped where the file system has no user xattrs.
tag_gen() {
	python3 -c 'import os,sys
for p in sys.argv[2:]: os.setxattr(p, "user.ibcache.gen", sys.argv[1].encode())' "$@" ||
		skip "no user xattrs on this file system"
}

# slice FILE OFFSET LENGTH: those bytes of FILE on stdout.
slice() {
	python3 -c 'import sys
f = open(sys.argv[1], "rb"); f.seek(int(sys.argv[2]))
sys.stdout.buffer.write(f.read(int(sys.argv[3])))' "$1" "$2" "$3"
}

# start_serve [OPTION...] URI...: ibcache-serve in the background on the
# export $EXP (unless -e is given), waiting for one "listening" line per
# URI.  Sets SRV_PID, SRV_CTL (its control socket), SRV_ERR and URIS.
start_serve() {
	local n=0 a exp=(-e "$EXP")
	for a in "$@"; do
		[[ $a == *://* ]] && n=$((n + 1))
		[[ $a == -e ]] && exp=()
	done
	SRV_N=$((SRV_N + 1))
	SRV_CTL=$BATS_TEST_TMPDIR/ctl.$SRV_N.sock
	SRV_OUT=$BATS_TEST_TMPDIR/serve.$SRV_N.out
	SRV_ERR=$BATS_TEST_TMPDIR/serve.$SRV_N.err
	local l=()
	for a in "$@"; do
		if [[ $a == *://* ]]; then l+=(-l "$a"); else l+=("$a"); fi
	done
	${SRV_PREFIX:-} "$IBCACHE_SERVE" "${exp[@]}" --ctl "$SRV_CTL" "${l[@]}" >"$SRV_OUT" 2>"$SRV_ERR" 3>&- &
	SRV_PID=$!
	BG_PIDS+=("$SRV_PID")
	disown "$SRV_PID" 2>/dev/null	# no "Killed" notice when teardown kills it
	wait_listening ibcache-serve "$SRV_PID" "$SRV_OUT" "$SRV_ERR" "$n" || return 1
	mapfile -t URIS < <(sed -n 's/^listening //p' "$SRV_OUT")
}

# run_tool EXPECTED_RC PROG ARGS...: for usage and error cases (60 s).
run_tool() {
	run_limited 60 "$(basename "$2")" "$1" "${@:2}"
}

# fetch_to FILE EXPECTED_RC ARGS...: the bytes to FILE, --stats JSON in
# $STATS, notes in $stderr.
fetch_to() {
	local out=$1 rc
	shift
	timeout 120 "$IBCACHE_FETCH" "${@:2}" --stats -o json >"$out" 2>"$BATS_TEST_TMPDIR/fetch.err"
	rc=$?
	STATS=$(sed -n '/^{/,$p' "$BATS_TEST_TMPDIR/fetch.err")
	stderr=$(sed '/^{/,$d' "$BATS_TEST_TMPDIR/fetch.err")
	if [ "$rc" -ne "$1" ]; then
		status=$rc output=""
		show_run "ibcache-fetch ${*:2}" "$1"
		return 1
	fi
}

# stat_of KEY: a number from $STATS.
stat_of() {
	python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$STATS" "$1"
}

# srv_status KEY [CTL]: a number from ibcache-serve status -o json.
srv_status() {
	"$IBCACHE_SERVE" status --ctl "${2:-$SRV_CTL}" -o json |
		python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}

# same A B: byte-identical, or say where they differ.
same() {
	cmp "$1" "$2" || die "$1 and $2 differ"
}

# flood URI NAME N PAUSE ROUNDS [SOCKETS]: in the background, ROUNDS times
# N full requests (256 pages, window 1) for $EXP/NAME, PAUSE seconds apart,
# never granting credit nor reading a reply; from SOCKETS sockets (default
# 1) taking turns, all on 127.0.0.2: another host than the fetches' 127.0.0.1
# to the server, which shares out its room per host.
flood() {
	python3 - "${1##*:}" "$EXP/$2" "$2" "$3" "$4" "$5" "${6:-1}" <<-'EOF' 3>&- &
	import os, socket, struct, sys, time
	port, path, name, n, pause, rounds, nsock = sys.argv[1:]
	def fnv(b):
	    h = 0xcbf29ce484222325
	    for x in b:
	        h = ((h ^ x) * 0x100000001b3) & (2**64 - 1)
	    return h
	st = os.stat(path)
	gen = fnv(struct.pack("<QQ", st.st_size, st.st_mtime_ns)) or 1
	socks = []
	for _ in range(int(nsock)):
	    socks.append(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
	    socks[-1].bind(("127.0.0.2", 0))
	rid = 0
	for _ in range(int(rounds)):
	    for _ in range(int(n)):
	        rid += 1
	        q = b"gfcc1\0\0\0" + struct.pack("<QQQqqIIIIiiQQ", rid, fnv(name.encode()), gen,
	            0, 1 << 20, 0x1234, 0, 2, 4096, 256, 1, 0, 256)
	        q += b"gfcx" + struct.pack("<BBHII", 1, 0, 1400, 1, 0)
	        socks[rid % len(socks)].sendto(q, ("127.0.0.1", int(port)))
	    time.sleep(float(pause))
	EOF
	BG_PIDS+=($!)
}

# closed_udp_port: a UDP port nothing listens on (bound then released).
closed_udp_port() {
	python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# send_udp PORT HEXBYTES...: raw datagrams to 127.0.0.1:PORT.
send_udp() {
	python3 - "$@" <<-'EOF'
	import socket, sys
	s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
	for h in sys.argv[2:]:
	    s.sendto(bytes.fromhex(h), ("127.0.0.1", int(sys.argv[1])))
	EOF
}
