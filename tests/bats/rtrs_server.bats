#!/usr/bin/env bats
# rtrs-server on loopback tcp://: usage errors, bad exports and configs,
# the listening lines, the control socket and status in every format, and
# (with rtrs-client built next to it) a round trip through a served file and
# the --allow list.  The kernel interop over rdma:// is tests/vm/rtrs-server-kernel.sh.
#
# Point the tests at another build with RTRS_SERVER=build-san/rtrs-server
# (RTRS_CLIENT defaults to the rtrs-client beside it).

bats_require_minimum_version 1.5.0

RTRS_SERVER=${RTRS_SERVER:-$BATS_TEST_DIRNAME/../../build/rtrs-server}
case $RTRS_SERVER in /*) ;; *) RTRS_SERVER=$PWD/$RTRS_SERVER ;; esac
RTRS_CLIENT=${RTRS_CLIENT:-$(dirname "$RTRS_SERVER")/rtrs-client}

# shellcheck source=common.bash
load common

setup() {
	[ -x "$RTRS_SERVER" ] || die "$RTRS_SERVER is not built (run make)"
	BG_PIDS=()
	T=$BATS_TEST_TMPDIR
	CTL=$T/ctl.sock
	SRV_OUT=$T/serve.out
	SRV_ERR=$T/serve.err
	truncate -s 4M "$T/disk.img"
	# nothing of ours may leak into the user's runtime directory
	export XDG_RUNTIME_DIR=$T/run
	mkdir -p -m 700 "$XDG_RUNTIME_DIR"
}

teardown() {
	kill_bg
	return 0
}

run_srv() {	# EXPECTED_RC ARGS...
	run_limited 30 rtrs-server "$1" "$RTRS_SERVER" "${@:2}"
}

# start_server ARGS...: serve in the background on a free loopback port
# (unless ARGS has -l or -c) with --ctl $CTL; waits for the listening lines.
# Sets SRV_PID, PORT (the first listener's port).  With SRV_NOHUP=1 it
# starts with SIGHUP ignored, as nohup(1) starts it (the same process:
# exec).
start_server() {
	# (SIGHUP as a terminal leaves it, whatever the suite was started
	# under: nohup would leave it ignored)
	local i args=("$@") pre=(env --default-signal=HUP)
	[[ " $* " == *" -l "* || " $* " == *" -c "* ]] || args+=(-l tcp://127.0.0.1:0)
	[ "${SRV_NOHUP:-0}" = 1 ] && pre=(bash -c 'trap "" HUP; exec "$@"' nohup)
	rm -f "$SRV_OUT"	# (a restart must not find the last run's lines)
	"${pre[@]}" "$RTRS_SERVER" "${args[@]}" --ctl "$CTL" >"$SRV_OUT" 2>"$SRV_ERR" 3>&- &
	SRV_PID=$!
	BG_PIDS+=("$SRV_PID")
	for i in $(seq 1 200); do
		grep -q '^listening ' "$SRV_OUT" 2>/dev/null && [ -S "$CTL" ] && break
		kill -0 "$SRV_PID" 2>/dev/null || { cat "$SRV_ERR" >&2; die "rtrs-server died"; return 1; }
		sleep 0.05
	done
	grep -q '^listening ' "$SRV_OUT" || die "rtrs-server did not start: $(cat "$SRV_ERR")"
	PORT=$(sed -n '1s/^listening .*:\([0-9]*\)$/\1/p' "$SRV_OUT")
}

need_client() {
	[ -x "$RTRS_CLIENT" ] || skip "rtrs-client not built ($RTRS_CLIENT)"
}

json() {	# EXPR: python expression over j = the JSON in $output
	python3 -c "import json,sys; j=json.loads(sys.argv[1]); print($1)" "$output"
}

# --- usage ---------------------------------------------------------------------

@test "no arguments prints usage and exits 2" {
	run_srv 2
	[[ $stderr == *"usage: rtrs-server COMMAND"* ]]
}

@test "--help lists serve and status on stdout" {
	run_srv 0 --help
	[[ $output == *"rtrs-server serve"* ]]
	[[ $output == *"rtrs-server status"* ]]
	[[ $output == *"--always-invalidate on|off"* ]]
	run_srv 0 serve --help
	[[ $output == *"--queue-depth N"* ]]
}

@test "unknown command and unknown option are usage errors" {
	run_srv 2 frobnicate
	[[ $stderr == "rtrs-server: unknown command 'frobnicate'"* ]]
	run_srv 2 -e d=$T/disk.img --bogus
	expect_stderr_line "rtrs-server: invalid option '--bogus'"
	run_srv 2 serve -e d=$T/disk.img --queue-depth
	[[ $stderr == "rtrs-server serve: option '--queue-depth' needs a value"* ]]
	run_srv 2 -e d=$T/disk.img extra
	expect_stderr_match "unexpected argument 'extra'"
	run_srv 2 -e d=$T/disk.img --verbose=1
	expect_stderr_line "rtrs-server: option '--verbose=1' takes no value"
}

@test "nothing to export is a usage error" {
	run_srv 2 -l tcp://127.0.0.1:0
	expect_stderr_match "^rtrs-server: nothing to export: give -e NAME=PATH"
}

@test "bad export specs are usage errors naming the spec" {
	run_srv 2 -e noequals
	expect_stderr_line "rtrs-server: -e: 'noequals' is not NAME=PATH[:ro]"
	run_srv 2 -e =/x
	expect_stderr_match "^rtrs-server: -e: '=/x': the name must be 1 to 254 bytes$"
	run_srv 2 -e a=:ro
	expect_stderr_match "no path"
	run_srv 2 -e d=$T/disk.img -e d=$T/disk.img
	expect_stderr_line "rtrs-server: -e: export name 'd' given twice"
}

@test "an export that cannot be opened is a runtime error naming the path" {
	run_srv 1 -l tcp://127.0.0.1:0 --ctl "$CTL" -e d=/nonexistent/disk.img
	expect_stderr_line "rtrs-server: export d: /nonexistent/disk.img: No such file or directory"
	run_srv 1 -l tcp://127.0.0.1:0 --ctl "$CTL" -e d=$T:ro
	expect_stderr_line "rtrs-server: export d: $T: not a regular file or a block device"
	: >"$T/empty"
	run_srv 1 -l tcp://127.0.0.1:0 --ctl "$CTL" -e d=$T/empty
	expect_stderr_match "empty"
	[ ! -e "$CTL" ]
}

@test "a server whose 'listening' lines cannot be written does not start: one line, exit 1" {
	run --separate-stderr timeout 30 bash -c '"$0" -l tcp://127.0.0.1:0 --ctl "$1" -e d="$2" >/dev/full' \
		"$RTRS_SERVER" "$CTL" "$T/disk.img"
	[ "$status" -eq 1 ] || die "exit $status: $stderr"
	[ "$stderr" = "rtrs-server: standard output: No space left on device: the 'listening' lines are lost" ] ||
		die "$stderr"
	[ ! -e "$CTL" ]
}

@test "an export of a size not in whole sectors: served, the tail out of reach said at start" {
	head -c 1000 /dev/urandom >"$T/odd.img"
	start_server -e odd=$T/odd.img
	grep -qx "rtrs-server: $T/odd.img: 1000 bytes, not whole 512-byte sectors: the last 488 are out of reach of clients" \
		"$SRV_ERR" || die "$(cat "$SRV_ERR")"
	need_client
	timeout 30 "$RTRS_CLIENT" read -s odd -p "tcp://127.0.0.1:$PORT" -d odd >"$T/got"
	cmp "$T/got" <(head -c 512 "$T/odd.img")
}

@test "numbers and switches are checked" {
	local e=(-e d=$T/disk.img)
	run_srv 2 "${e[@]}" --queue-depth 0
	expect_stderr_line "rtrs-server: --queue-depth: '0' too small (1..65535)"
	run_srv 2 "${e[@]}" --queue-depth 70000
	expect_stderr_match "too large"
	run_srv 2 "${e[@]}" --queue-depth 12x
	expect_stderr_match "invalid"
	run_srv 2 "${e[@]}" --chunk-size 100000
	expect_stderr_match "power of two"
	run_srv 2 "${e[@]}" --queue-depth 65535 --chunk-size 128k
	expect_stderr_match "at most 256M"
	run_srv 2 "${e[@]}" --chunk-size 4k
	expect_stderr_match "too small"
	run_srv 2 "${e[@]}" --always-invalidate maybe
	expect_stderr_line "rtrs-server: --always-invalidate: 'maybe' is not on or off"
	run_srv 2 "${e[@]}" --hb-interval 1ms
	expect_stderr_match "hb-interval"
	run_srv 2 "${e[@]}" --hb-missed 0
	expect_stderr_match "hb-missed"
	run_srv 2 "${e[@]}" --io-threads 257
	expect_stderr_line "rtrs-server: --io-threads: '257' too large (0..256)"
	run_srv 2 "${e[@]}" --io-threads -1
	expect_stderr_match "^rtrs-server: --io-threads: '-1' "
}

@test "--allow takes addresses, prefixes and session names, nothing else" {
	local e=(-e d=$T/disk.img)
	run_srv 2 "${e[@]}" --allow a.b
	expect_stderr_match "'a.b' is neither an IP address"
	run_srv 2 "${e[@]}" --allow 10.0.0.0/33
	expect_stderr_match "prefix length too large"
	run_srv 2 "${e[@]}" --allow a/b
	expect_stderr_match "neither"
}

@test "listener URIs are checked" {
	local e=(-e d=$T/disk.img)
	run_srv 2 "${e[@]}" -l udp://127.0.0.1:1
	expect_stderr_line "rtrs-server: -l: 'udp://127.0.0.1:1': RTRS listens on rdma:// or tcp://"
	run_srv 2 "${e[@]}" -l tcp://
	expect_stderr_match "^rtrs-server: -l: "
	run_srv 2 "${e[@]}" -l tcp://127.0.0.1:99999
	expect_stderr_match "^rtrs-server: -l: "
}

@test "rdma:// without an RDMA device says so in one line" {
	if ibv_devinfo -l 2>/dev/null | grep -q '^ '; then
		skip "an RDMA device exists here"
	fi
	run_srv 1 -e d=$T/disk.img -l rdma://127.0.0.1:0 --ctl "$CTL"
	expect_stderr_match "no RDMA device found"
}

@test "a port in use is a runtime error" {
	start_server -e d=$T/disk.img
	run_srv 1 -e d=$T/disk.img -l tcp://127.0.0.1:$PORT --ctl "$T/other.sock"
	expect_stderr_match "127.0.0.1:$PORT"
}

# --- serving and status --------------------------------------------------------

@test "serve prints its listeners, answers status, exits 0 on SIGTERM" {
	start_server -e d=$T/disk.img -e r=$T/disk.img:ro -l tcp://127.0.0.1:0 -l tcp://127.0.0.1:0
	[ "$(grep -c '^listening tcp://127.0.0.1:[1-9][0-9]*$' "$SRV_OUT")" -eq 2 ]
	run_srv 0 status --ctl "$CTL"
	[[ $output == *"server:"* ]]
	[[ $output == *"always_invalidate  yes"* ]]
	[[ $output == *"queue_depth        512"* ]]
	[[ $output =~ NAME\ +PATH\ +TYPE ]]
	[[ $output =~ d\ +$T/disk.img\ +file\ +4194304\ +no ]]
	[[ $output =~ r\ +$T/disk.img\ +file\ +4194304\ +yes ]]
	kill -TERM "$SRV_PID"
	wait "$SRV_PID"
	[ ! -e "$CTL" ]
}

@test "SIGHUP (its terminal gone) stops serve as SIGTERM does: exit 0, the control socket removed" {
	start_server -e d=$T/disk.img
	kill -HUP "$SRV_PID"
	local rc=0
	wait "$SRV_PID" || rc=$?
	[ "$rc" -eq 0 ] || die "exit $rc: $(cat "$SRV_ERR")"
	[ ! -e "$CTL" ]
}

@test "SIGHUP ignored at start (nohup): serve ignores it and goes on serving" {
	SRV_NOHUP=1 start_server -e d=$T/disk.img
	kill -HUP "$SRV_PID"
	sleep 0.3
	kill -0 "$SRV_PID" || die "it exited on SIGHUP: $(cat "$SRV_ERR")"
	run_srv 0 status --ctl "$CTL"
	[[ $output == *"server:"* ]]
	kill -TERM "$SRV_PID"
	wait "$SRV_PID"
	[ ! -e "$CTL" ]
}

@test "status -o json and -o yaml carry the same tables" {
	start_server -e d=$T/disk.img --queue-depth 64 --chunk-size 64k --always-invalidate off
	run_srv 0 status --ctl "$CTL" -o json
	[ "$(json 'j["server"]["queue_depth"]')" = 64 ]
	[ "$(json 'j["server"]["chunk_size"]')" = 65536 ]
	[ "$(json 'j["server"]["max_io_size"]')" = 61440 ]
	[ "$(json 'j["server"]["always_invalidate"]')" = False ]
	[ "$(json 'j["exports"][0]["name"]')" = d ]
	[ "$(json 'len(j["sessions"]) + len(j["paths"]) + len(j["devices"])')" = 0 ]
	run_srv 0 status --ctl "$CTL" -o yaml
	python3 -c 'import yaml,sys; y=yaml.safe_load(sys.argv[1]); assert y["server"]["queue_depth"] == 64 and y["exports"][0]["size"] == 4194304' "$output"
	run_srv 2 status --ctl "$CTL" -o xml
	[[ $stderr == "rtrs-server status: -o: 'xml' is not text, yaml or json"* ]]
}

@test "status without a server is a runtime error" {
	run_srv 1 status --ctl "$T/none.sock"
	expect_stderr_line "rtrs-server: status: no rtrs-server answers at $T/none.sock (not running? --ctl PATH)"
	run_srv 2 status --ctl "$T/none.sock" extra
	[[ $stderr == "rtrs-server status: unexpected argument 'extra'"* ]]
}

@test "status says an export's file was deleted (removed, or renamed over) while served" {
	cp "$T/disk.img" "$T/a.img"
	cp "$T/disk.img" "$T/b.img"
	start_server -e a=$T/a.img -e b=$T/b.img
	run_srv 0 status --ctl "$CTL" -o json
	[ "$(json '[e["deleted"] for e in j["exports"]]')" = "[False, False]" ] || die "$output"
	rm "$T/a.img"
	cp "$T/disk.img" "$T/new.img"
	mv "$T/new.img" "$T/b.img"
	run_srv 0 status --ctl "$CTL" -o json
	[ "$(json '[e["deleted"] for e in j["exports"]]')" = "[True, True]" ] || die "$output"
}

@test "status of a stopped server: one line after 5 s, exit 1; once continued it answers" {
	local t0
	start_server -e d=$T/disk.img
	kill -STOP "$SRV_PID"
	t0=$SECONDS
	run_srv 1 status --ctl "$CTL"
	kill -CONT "$SRV_PID"
	expect_stderr_line "rtrs-server: status: $CTL: no answer within 5 s (is the process stopped?)"
	[ $((SECONDS - t0)) -le 8 ]
	run_srv 0 status --ctl "$CTL"
	[[ $output == *"pid "* ]]
}

@test "the default control socket is per user; a second server is refused" {
	"$RTRS_SERVER" -e d=$T/disk.img -l tcp://127.0.0.1:0 >"$SRV_OUT" 2>"$SRV_ERR" &
	SRV_PID=$!
	BG_PIDS+=("$SRV_PID")
	local i
	for i in $(seq 1 100); do [ -S "$XDG_RUNTIME_DIR/xprt/rtrs-server.sock" ] && break; sleep 0.05; done
	run_srv 0 status
	[[ $output == *"$XDG_RUNTIME_DIR/xprt/rtrs-server.sock"* ]]
	run_srv 1 -e d=$T/disk.img -l tcp://127.0.0.1:0
	expect_stderr_match "^rtrs-server: control socket .*: in use by a running process \(another rtrs-server\? give this one --ctl PATH\)$"
	[ -z "$output" ] || die "a server that did not start said: $output"
}

@test "a --ctl that names a file of another kind: refused, the file untouched (server and client)" {
	echo precious >"$T/notes.txt"
	run_srv 1 -e d=$T/disk.img -l tcp://127.0.0.1:0 --ctl "$T/notes.txt"
	expect_stderr_line "rtrs-server: control socket $T/notes.txt: exists and is not a socket"
	[ "$(cat "$T/notes.txt")" = precious ]
	mkdir "$T/adir"
	run_srv 1 -e d=$T/disk.img -l tcp://127.0.0.1:0 --ctl "$T/adir"
	expect_stderr_line "rtrs-server: control socket $T/adir: exists and is not a socket"
	[ -d "$T/adir" ]
	# a client goes on without its control socket, and says so
	"$RTRS_SERVER" -e d=$T/disk.img -l tcp://127.0.0.1:0 --ctl "$T/srv.sock" >"$SRV_OUT" 2>"$SRV_ERR" &
	SRV_PID=$!
	BG_PIDS+=("$SRV_PID")
	wait_listening rtrs-server "$SRV_PID" "$SRV_OUT" "$SRV_ERR"
	local uri
	uri=$(sed -n 's/^listening //p' "$SRV_OUT")
	local rc=0
	timeout 30 "$RTRS_CLIENT" read -s ctlf -p "$uri" -d d --length 1k --ctl "$T/notes.txt" \
		>"$T/got" 2>"$T/got.err" || rc=$?
	[ "$rc" -eq 0 ] && [ "$(stat -c %s "$T/got")" -eq 1024 ] || die "rc $rc: $(cat "$T/got.err")"
	stderr=$(cat "$T/got.err")
	[[ $stderr == *"control socket $T/notes.txt: exists and is not a socket"* ]] || die "$stderr"
	[ "$(cat "$T/notes.txt")" = precious ]
	# the server's socket given to a client command: named as what it is not
	run --separate-stderr timeout 30 "$RTRS_CLIENT" status -s x --ctl "$T/srv.sock"
	[ "$status" -eq 1 ] || die "exit $status: $stderr"
	[[ $stderr == "rtrs-client status: $T/srv.sock is not an rtrs-client session's control socket (it answered: "* ]] ||
		die "$stderr"
}

@test "a config file gives listeners, exports and settings; the command line wins" {
	cat >"$T/srv.yaml" <<-EOF
	listen: tcp://127.0.0.1:0
	exports:
	  - d=$T/disk.img
	  - { name: r, path: $T/disk.img, readonly: yes }
	queue_depth: 32
	chunk_size: 32k
	always_invalidate: off
	allow: [127.0.0.0/8, trusted]
	hb_interval: 2s
	hb_missed: 3
	io_threads: 2
	EOF
	start_server -c "$T/srv.yaml" --queue-depth 16
	run_srv 0 status --ctl "$CTL" -o json
	[ "$(json 'j["server"]["io_threads"]')" = 2 ]
	[ "$(json 'j["server"]["queue_depth"]')" = 16 ]
	[ "$(json 'j["server"]["chunk_size"]')" = 32768 ]
	[ "$(json 'j["server"]["hb_interval_ms"]')" = 2000 ]
	[ "$(json 'j["server"]["allow"]')" = "['127.0.0.0/8', 'trusted']" ]
	[ "$(json '[e["ro"] for e in j["exports"]]')" = "[False, True]" ]
	kill "$SRV_PID"; wait "$SRV_PID" 2>/dev/null || true
	# one entry stands for a list of one, a string or a map alike
	printf 'listen: tcp://127.0.0.1:0\nexports: one=%s\n' "$T/disk.img" >"$T/one.yaml"
	start_server -c "$T/one.yaml"
	run_srv 0 status --ctl "$CTL" -o json
	[ "$(json '[(e["name"], e["ro"]) for e in j["exports"]]')" = "[('one', False)]" ] || die "$output"
	kill "$SRV_PID"; wait "$SRV_PID" 2>/dev/null || true
	printf 'listen: tcp://127.0.0.1:0\nexports: { name: m, path: %s, readonly: yes }\n' "$T/disk.img" >"$T/one.yaml"
	start_server -c "$T/one.yaml"
	run_srv 0 status --ctl "$CTL" -o json
	[ "$(json '[(e["name"], e["ro"]) for e in j["exports"]]')" = "[('m', True)]" ] || die "$output"
}

@test "config errors name the file, the line and the key" {
	printf 'exports: [d=%s]\nqueue_depht: 4\n' "$T/disk.img" >"$T/bad.yaml"
	run_srv 2 -c "$T/bad.yaml"
	expect_stderr_match "^rtrs-server: $T/bad.yaml: line 2: unknown key 'queue_depht'"
	printf 'exports: [d=%s]\nchunk_size: huge\n' "$T/disk.img" >"$T/bad.yaml"
	run_srv 2 -c "$T/bad.yaml"
	expect_stderr_match "line 2: chunk_size"
	printf 'exports: [noequals]\n' >"$T/bad.yaml"
	run_srv 2 -c "$T/bad.yaml"
	expect_stderr_match "line 1: exports: 'noequals' is not NAME=PATH"
	printf 'exports: 3\n' >"$T/bad.yaml"
	run_srv 2 -c "$T/bad.yaml"
	expect_stderr_match "line 1: exports: '3' is not NAME=PATH"
	printf 'exports: [\n' >"$T/bad.yaml"
	run_srv 2 -c "$T/bad.yaml"
	expect_stderr_match "^rtrs-server: $T/bad.yaml: line "
	run_srv 1 -c "$T/missing.yaml"
	expect_stderr_match "missing.yaml"
}

# --- with rtrs-client --------------------------------------------------------------

@test "rtrs-client writes and reads back through a served file; status counts it" {
	need_client
	start_server -e d=$T/disk.img -v
	head -c 1M /dev/urandom >"$T/pat"
	run_limited 60 rtrs-client 0 "$RTRS_CLIENT" write -s bats -p tcp://127.0.0.1:$PORT -d d --offset 64k <"$T/pat"
	timeout 60 "$RTRS_CLIENT" read -s bats -p tcp://127.0.0.1:$PORT -d d --offset 64k \
		--length 1M >"$T/back"
	cmp "$T/pat" "$T/back"
	cmp "$T/pat" <(dd if="$T/disk.img" bs=64k skip=1 count=16 status=none)
	run_srv 0 status --ctl "$CTL" -o json
	[ "$(json 'j["exports"][0]["write_bytes"]')" = 1048576 ]
	[ "$(json 'j["exports"][0]["read_bytes"]')" = 1048576 ]
	grep -q "session 'bats' up" "$SRV_ERR"
}

# io_threads_roundtrip N: a write with its flush and a read back through a
# server with N IO threads; what went through them shows as queued.
io_threads_roundtrip() {
	need_client
	start_server -e d=$T/disk.img --io-threads "$1"
	head -c 3M /dev/urandom >"$T/pat"
	run_limited 60 rtrs-client 0 "$RTRS_CLIENT" write -s bats -p tcp://127.0.0.1:$PORT -d d <"$T/pat"
	timeout 60 "$RTRS_CLIENT" read -s bats -p tcp://127.0.0.1:$PORT -d d --length 3M >"$T/back"
	cmp "$T/pat" "$T/back"
	run_srv 0 status --ctl "$CTL" -o json
	[ "$(json 'j["server"]["io_threads"]')" = "$1" ]
	[ "$(json 'j["exports"][0]["errors"]')" = 0 ]
	[ "$(json 'j["exports"][0]["flushes"] >= 1')" = True ]
}

@test "--io-threads 0: every request on the serving thread, nothing queued" {
	io_threads_roundtrip 0
	[ "$(json 'j["exports"][0]["queued"]')" = 0 ]
}

@test "--io-threads 2: the flush that ends a write goes to an IO thread" {
	io_threads_roundtrip 2
	[ "$(json 'j["exports"][0]["queued"] >= 1')" = True ]
}

@test "--allow refuses other addresses and other session names" {
	need_client
	start_server -e d=$T/disk.img --allow 10.1.2.3 --allow good
	run_limited 60 rtrs-client 1 "$RTRS_CLIENT" read -s bad -p tcp://127.0.0.1:$PORT -d d --length 4k
	run_limited 60 rtrs-client 0 "$RTRS_CLIENT" read -s good -p tcp://127.0.0.1:$PORT -d d --length 4k
	run_srv 0 status --ctl "$CTL" -o json
	[ "$(json 'j["server"]["paths_closed"]')" -ge 1 ]
}

# clt_status EXPR: until the client session srvctl's status makes EXPR true
# (a python expression over j; at most 20 s)
clt_status() {
	local i
	for i in $(seq 1 200); do
		run --separate-stderr "$RTRS_CLIENT" status -s srvctl -o json
		[ "$status" -eq 0 ] && [ "$(json "$1")" = True ] && return 0
		sleep 0.1
	done
	die "client status never had $1: $output $stderr"
}

# bench_until SESSION DEVICE RW EXPR: rtrs-client bench in the background
# (BENCH_PID; stderr in $T/b.err) until the server's status makes EXPR
# true (a python expression over j; at most 10 s).
bench_until() {
	local i
	"$RTRS_CLIENT" bench -s "$1" -p "tcp://127.0.0.1:$PORT" -d "$2" --time 20 --rw "$3" -q \
		>/dev/null 2>"$T/b.err" &
	BENCH_PID=$!
	BG_PIDS+=("$BENCH_PID")
	for i in $(seq 1 100); do
		run_srv 0 status --ctl "$CTL" -o json
		[ "$(json "$4")" = True ] && return 0
		sleep 0.1
	done
	die "server status never had $4: $output"
}

# half_open N: N paths that never get past their first connection (a
# tcp:// CONN_REQ carrying an RTRS conn_req with first_conn, fresh uuids,
# cid 0 of 2), opened one after the other, in the background; "N accepted"
# goes to $T/half.out once they all had their answer.  Sets HALF_PID.
half_open() {
	python3 -c '
import os, socket, struct, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
socks, acc = [], 0
for i in range(n):
    pd = bytearray(56)
    struct.pack_into("<HHHHH", pd, 2, 0x1BBD, 0x0200, 0, 2, 0)
    pd[12:44] = os.urandom(32)
    pd[44] = 1
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(struct.pack(">BBHIIHHIIII", 1, 0, 0, 56, 0x58524354, 1, 0, 65536, 128, 128, 0) + pd)
    s.settimeout(10)
    acc += s.recv(32)[:1] == b"\x02"
    socks.append(s)
print(acc, "accepted", n - acc, "refused", flush=True)
time.sleep(120)
' "$PORT" "$1" >"$T/half.out" 2>&1 3>&- &
	HALF_PID=$!
	BG_PIDS+=("$HALF_PID")
}

srv_cpu_s() {	# user + system seconds of the server so far
	awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$SRV_PID/stat"
}

@test "paths that never send INFO_REQ: at most 256 held; newcomers refused during the grace, then the oldest gives way; status carries on" {
	need_client
	start_server -e d=$T/disk.img
	local t0
	t0=$(date +%s)
	half_open 300
	for i in $(seq 1 600); do
		grep -q accepted "$T/half.out" 2>/dev/null && break
		sleep 0.1
	done
	local acc ref
	read -r acc _ ref _ <"$T/half.out" || die "half-open paths: $(cat "$T/half.out")"
	[ "$((acc + ref))" = 300 ] && [ "$acc" -ge 256 ] || die "half-open paths: $(cat "$T/half.out")"
	run_limited 3 rtrs-server 0 "$RTRS_SERVER" status --ctl "$CTL" -o json
	[ "$(json 'j["server"]["paths"]')" = 256 ] || die "paths held: $(json 'j["server"]["paths"]')"
	# those that came within 5 s of the first were refused, not let in
	# by closing a path that may be about to finish
	if [ "$ref" -gt 0 ]; then
		grep -q "256 paths connecting, none for 5 s: the new one from 127.0.0.1:[0-9]* is refused (busy: it may try again)" "$SRV_ERR"
	fi
	# past the grace, a client gets in: the oldest half-open path gives way
	while [ "$(date +%s)" -lt $((t0 + 8)) ]; do sleep 0.2; done
	head -c 256k /dev/urandom >"$T/pat"
	run_limited 10 rtrs-client 0 "$RTRS_CLIENT" write -s bats -p tcp://127.0.0.1:$PORT -d d <"$T/pat"
	timeout 10 "$RTRS_CLIENT" read -s bats -p tcp://127.0.0.1:$PORT -d d --length 256k >"$T/back"
	cmp "$T/pat" "$T/back"
	grep -q "256 paths connecting (none has sent INFO_REQ): the oldest, from 127.0.0.1:[0-9]*, is closed for the new one from 127.0.0.1:" "$SRV_ERR"
	# the half-open ones go all at once; the server answers and stops at once
	kill "$HALF_PID"
	wait "$HALF_PID" 2>/dev/null || true
	run_limited 3 rtrs-server 0 "$RTRS_SERVER" status --ctl "$CTL" -o json
	cpu=$(srv_cpu_s)
	[ "$(echo "$cpu < 5" | bc)" = 1 ] || die "server CPU time: $cpu s"
	kill -TERM "$SRV_PID"
	for i in $(seq 1 30); do
		kill -0 "$SRV_PID" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$SRV_PID" 2>/dev/null; then die "still running 3 s after SIGTERM"; fi
	wait "$SRV_PID"
}

@test "out of file descriptors: the listener rests instead of spinning, says so once, and serves again when fds are back" {
	need_client
	printf '#!/bin/sh\nulimit -n 40\nexec "%s" "$@"\n' "$RTRS_SERVER" >"$T/lowfd"
	chmod +x "$T/lowfd"
	RTRS_SERVER=$T/lowfd start_server -e d=$T/disk.img
	# every fd the server has left, and a few more waiting in the backlog
	n=$((40 - $(ls "/proc/$SRV_PID/fd" | wc -l) + 4))
	python3 -c '
import socket, sys, time
s = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for i in range(int(sys.argv[2]))]
print("open", flush=True)
time.sleep(60)
' "$PORT" "$n" >"$T/idle.out" 2>&1 3>&- &
	IDLE_PID=$!
	BG_PIDS+=("$IDLE_PID")
	for i in $(seq 1 100); do
		grep -q open "$T/idle.out" 2>/dev/null && break
		sleep 0.05
	done
	# within the 5 s they may take to send their CONN_REQ
	c0=$(srv_cpu_s)
	sleep 2
	c1=$(srv_cpu_s)
	[ "$(echo "$c1 - $c0 < 0.3" | bc)" = 1 ] || die "server CPU time over 2 s out of fds: $c1 - $c0 s"
	grep -q "tcp listener on port $PORT: accepting a connection: Too many open files; new connections wait, tried again every 100 ms" "$SRV_ERR"
	# the control socket answers at once (its spare descriptor), without
	# spinning on an accept that fails either
	run_limited 2 rtrs-server 0 "$RTRS_SERVER" status --ctl "$CTL" -o json
	c2=$(srv_cpu_s)
	[ "$(echo "$c2 - $c1 < 0.3" | bc)" = 1 ] || die "server CPU time for a status out of fds: $c2 - $c1 s"
	[ "$(grep -c 'Too many open files' "$SRV_ERR")" = 1 ]
	# the idle clients go: a client gets in
	kill "$IDLE_PID"
	wait "$IDLE_PID" 2>/dev/null || true
	run_limited 10 rtrs-client 0 "$RTRS_CLIENT" read -s bats -p tcp://127.0.0.1:$PORT -d d --length 4k
}

@test "a connection that sends garbage or no request in time: one warning naming it, counted as dropped in status" {
	start_server -e d=$T/disk.img
	python3 -c '
import socket, sys, time
port = int(sys.argv[1])
quiet = socket.create_connection(("127.0.0.1", port))
quiet.sendall(b"\x01\x00")
http = socket.create_connection(("127.0.0.1", port))
http.sendall(b"GET / HTTP/1.0\r\n\r\n")
print(quiet.getsockname()[1], http.getsockname()[1], flush=True)
time.sleep(30)
' "$PORT" >"$T/garbage.out" 3>&- &
	BG_PIDS+=($!)
	for i in $(seq 1 300); do
		[ "$(grep -c dropped "$SRV_ERR")" -ge 2 ] && break
		sleep 0.05
	done
	read -r quiet http <"$T/garbage.out"
	grep -qx "rtrs-server: tcp listener on port $PORT: connection from 127.0.0.1:$http dropped: its first bytes are not a CONN_REQ (unknown frame type)" "$SRV_ERR"
	grep -qx "rtrs-server: tcp listener on port $PORT: connection from 127.0.0.1:$quiet dropped: no complete CONN_REQ within 5000 ms (2 bytes came)" "$SRV_ERR"
	[ "$(grep -c dropped "$SRV_ERR")" = 2 ]
	run_srv 0 status --ctl "$CTL" -o json
	[ "$(json 'j["server"]["dropped"]')" = 2 ]
	[ "$(json 'j["server"]["rejected"]')" = 0 ]
}

@test "disconnect and force-close: a session's paths and devices closed from the server, as the kernel's sysfs" {
	need_client
	truncate -s 4M "$T/other.img"
	start_server -e d=$T/disk.img -e e=$T/other.img
	"$RTRS_CLIENT" bench -s srvctl -p "tcp://127.0.0.3@127.0.0.1:$PORT" \
		-p "tcp://127.0.0.4@127.0.0.1:$PORT" -d d --time 30 --rw randrw --verify \
		--reconnect-delay 100 -q -o json >"$T/b.json" 2>"$T/b.err" &
	local bp=$!
	BG_PIDS+=($bp)
	clt_status 'j.get("activity") == "bench" and all(p["state"] == "connected" for p in j["paths"])'
	# one path, by its number: the client reconnects it, no IO fails
	run_srv 0 disconnect srvctl 0 --ctl "$CTL"
	[[ $output =~ ^path\ 0\ of\ session\ srvctl\ \(127\.0\.0\.[34]:[0-9]+\):\ disconnected$ ]] || die "$output"
	clt_status 'sum(p["reconnects_ok"] for p in j["paths"]) == 1 and all(p["state"] == "connected" for p in j["paths"])'
	# all of them
	run_srv 0 disconnect --ctl "$CTL" srvctl
	[ "$(printf '%s\n' "$output" | grep -c ': disconnected$')" -eq 2 ]
	clt_status 'sum(p["reconnects_ok"] for p in j["paths"]) == 3 and all(p["state"] == "connected" for p in j["paths"])'
	run_srv 1 disconnect srvctl 7 --ctl "$CTL"
	expect_stderr_line "rtrs-server disconnect: session srvctl has no path 7 to disconnect"
	run_srv 1 disconnect nosuch --ctl "$CTL"
	expect_stderr_line "rtrs-server disconnect: no session 'nosuch'"
	run_srv 2 disconnect srvctl '' --ctl "$CTL"
	[[ ${stderr%%$'\n'*} == "rtrs-server disconnect: an empty path" ]]
	run_srv 2 force-close '' d --ctl "$CTL"
	[[ ${stderr%%$'\n'*} == "rtrs-server force-close: an empty session name" ]]
	run_srv 1 force-close srvctl e --ctl "$CTL"
	expect_stderr_line "rtrs-server force-close: session srvctl has no device e open"
	run_srv 2 force-close srvctl --ctl "$CTL"
	[[ ${stderr%%$'\n'*} == "rtrs-server force-close: a device is needed (export name or id)" ]]
	# the device, by its export name: the client's IO on it fails
	run_srv 0 force-close srvctl d --ctl "$CTL"
	expect_output "device 0 (d) of session srvctl: closed"
	local rc=0
	wait $bp || rc=$?
	[ "$rc" -eq 1 ] || die "bench exited $rc: $(cat "$T/b.err")"
	grep -q "^rtrs-client bench: [0-9]* IO errors, the first at offset [0-9]*: the server has device d closed (rtrs-server force-close, or it lost the session)$" "$T/b.err" ||
		die "$(cat "$T/b.err")"
	run_srv 0 status --ctl "$CTL" -o json
	[ "$(json 'not any(d["session"] == "srvctl" and d["export"] == "d" for d in j["devices"])')" = True ]
}

@test "a listener on [::] takes IPv4 and IPv6 clients; an IPv4 client is shown and allowed as IPv4" {
	need_client
	[ -e /proc/net/if_inet6 ] || skip "no IPv6 on this host"
	start_server -e d=$T/disk.img -l "tcp://[::]:0" --allow 127.0.0.0/8 --allow ::1 --allow v4 --allow v6
	grep -q "^listening tcp://\[::\]:$PORT$" "$SRV_OUT" || die "$(cat "$SRV_OUT")"
	head -c 64k /dev/urandom >"$T/pat"
	run_limited 60 rtrs-client 0 "$RTRS_CLIENT" write -s v4 -p "tcp://127.0.0.1:$PORT" -d d <"$T/pat"
	timeout 60 "$RTRS_CLIENT" read -s v6 -p "tcp://[::1]:$PORT" -d d --length 64k >"$T/back"
	cmp "$T/pat" "$T/back"
	# the IPv4 client came in as ::ffff:127.0.0.1 and is logged and matched as 127.0.0.1
	bench_until v4 d read 'any(p["session"] == "v4" for p in j["paths"])'
	local bp=$BENCH_PID
	[ "$(json '[p["peer"].rsplit(":", 1)[0] for p in j["paths"] if p["session"] == "v4"]')" = "['127.0.0.1']" ] ||
		die "paths: $output"
	kill -INT $bp
	wait $bp || die "bench: $(cat "$T/b.err")"
}

@test "--dev-search-path: names that are no export open below it, as the kernel's dev_search_path, never outside it" {
	need_client
	mkdir -p "$T/devs/sub" "$T/s1"
	truncate -s 1M "$T/devs/a.img" "$T/devs/sub/b.img" "$T/outside.img" "$T/s1/c.img"
	ln -s "$T/outside.img" "$T/devs/out"
	start_server -e d=$T/disk.img --dev-search-path "$T/devs"
	head -c 64k /dev/urandom >"$T/pat"
	run_limited 60 rtrs-client 0 "$RTRS_CLIENT" write -s s1 -p "tcp://127.0.0.1:$PORT" -d a.img <"$T/pat"
	cmp "$T/pat" <(head -c 64k "$T/devs/a.img")
	run_limited 60 rtrs-client 0 "$RTRS_CLIENT" write -s s1 -p "tcp://127.0.0.1:$PORT" -d /sub/b.img <"$T/pat"
	cmp "$T/pat" <(head -c 64k "$T/devs/sub/b.img")
	# export names still come first
	run_limited 60 rtrs-client 0 "$RTRS_CLIENT" read -s s1 -p "tcp://127.0.0.1:$PORT" -d d --length 4k
	# nothing outside the search path: .., a link out of it, a missing name
	run_limited 60 rtrs-client 1 "$RTRS_CLIENT" read -s s1 -p "tcp://127.0.0.1:$PORT" -d ../outside.img --length 4k
	expect_stderr_line "rtrs-client read: device ../outside.img: no such export"
	run_limited 60 rtrs-client 1 "$RTRS_CLIENT" read -s s1 -p "tcp://127.0.0.1:$PORT" -d out --length 4k
	expect_stderr_line "rtrs-client read: device out: no such export"
	run_limited 60 rtrs-client 1 "$RTRS_CLIENT" read -s s1 -p "tcp://127.0.0.1:$PORT" -d nosuch --length 4k
	expect_stderr_line "rtrs-client read: device nosuch: no such export"
	cmp "$T/outside.img" <(head -c 1M /dev/zero)
	# one file under two names is one device: its single writer counts
	bench_until s1 a.img randwrite 'any(d["session"] == "s1" and d["access"] == "rw" for d in j["devices"])'
	local bp=$BENCH_PID
	run_limited 60 rtrs-client 1 "$RTRS_CLIENT" write -s s2 -p "tcp://127.0.0.1:$PORT" -d sub/../a.img <"$T/pat"
	expect_stderr_line "rtrs-client write: device sub/../a.img: access refused (open for writing elsewhere, or read-only)"
	kill -INT $bp
	wait $bp || die "bench: $(cat "$T/b.err")"
	run_srv 0 status --ctl "$CTL" -o json
	# what the search path found is listed by its real path
	[ "$(json 'sorted(e["name"] for e in j["exports"])')" = "['$(realpath "$T/devs")/a.img', '$(realpath "$T/devs")/sub/b.img', 'd']" ] || die "$output"
	# ...and so does an export's (d) under its file's name in the search path
	cp "$T/disk.img" "$T/devs/d.img"
	kill "$SRV_PID"; wait "$SRV_PID" 2>/dev/null || true
	start_server -e d=$T/devs/d.img -e alias=$T/devs/d.img --dev-search-path "$T/devs"
	bench_until s1 d randwrite 'any(d["session"] == "s1" and d["access"] == "rw" for d in j["devices"])'
	bp=$BENCH_PID
	for name in d.img alias; do
		run_limited 60 rtrs-client 1 "$RTRS_CLIENT" write -s s2 -p "tcp://127.0.0.1:$PORT" -d $name <"$T/pat"
		expect_stderr_line "rtrs-client write: device $name: access refused (open for writing elsewhere, or read-only)"
	done
	kill -INT $bp
	wait $bp || die "bench: $(cat "$T/b.err")"
	# once it has gone, another name of the file takes the writer
	run_limited 60 rtrs-client 0 "$RTRS_CLIENT" write -s s2 -p "tcp://127.0.0.1:$PORT" -d alias <"$T/pat"
	kill "$SRV_PID"; wait "$SRV_PID" 2>/dev/null || true
	# %SESSNAME%: each session its own directory
	start_server -e d=$T/disk.img --dev-search-path "$T/%SESSNAME%"
	run_limited 60 rtrs-client 0 "$RTRS_CLIENT" write -s s1 -p "tcp://127.0.0.1:$PORT" -d c.img <"$T/pat"
	cmp "$T/pat" <(head -c 64k "$T/s1/c.img")
	run_limited 60 rtrs-client 1 "$RTRS_CLIENT" read -s s2 -p "tcp://127.0.0.1:$PORT" -d c.img --length 4k
	expect_stderr_line "rtrs-client read: device c.img: no such export"
}
