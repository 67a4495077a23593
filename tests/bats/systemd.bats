#!/usr/bin/env bats
# The systemd units (systemd/*.service.in, installed by make install):
# systemd-analyze verify accepts them, and each unit's ExecStart, run as
# systemd would run it for an instance, serves.  The test rewrites only
# where the unit looks for its config and puts its socket (/etc/xprt,
# /run/xprt) to this test's directory.

bats_require_minimum_version 1.5.0

load common

setup() {
	B=$(dirname "${MKSHMCON:-$BATS_TEST_DIRNAME/../../build/mkshmcon}")
	case $B in /*) ;; *) B=$PWD/$B ;; esac
	T=$BATS_TEST_TMPDIR
	BG_PIDS=()
	mkdir -p "$T/units" "$T/etc/xprt/rtrs-server" "$T/etc/xprt/ibcache-serve" \
		"$T/etc/xprt/rtrs-client" "$T/run"
	for u in "$BATS_TEST_DIRNAME"/../../systemd/*.service.in; do
		n=${u##*/}
		sed "s|@BINDIR@|$B|g" "$u" >"$T/units/${n%.in}"
	done
}

teardown() {
	kill_bg
	return 0
}

# exec_start UNIT INSTANCE: the unit's ExecStart for INSTANCE, its paths
# moved into $T
exec_start() {
	sed -n 's/^ExecStart=//p' "$T/units/$1" |
		sed "s|%i|$2|g; s|/etc/xprt|$T/etc/xprt|g; s|/run/xprt|$T/run|g"
}

@test "systemd-analyze verify accepts every unit" {
	command -v systemd-analyze >/dev/null || skip "systemd-analyze not installed"
	run systemd-analyze verify --man=no "$T"/units/*.service
	[ "$status" -eq 0 ] || die "$output"
	[ -z "$output" ] || die "$output"
}

@test "rtrs-server@.service: its ExecStart serves the instance's config, status answers, SIGTERM ends it cleanly" {
	local port cmd i
	port=$(unused_tcp_port)
	truncate -s 4M "$T/vol1.img"
	printf 'listen: [tcp://127.0.0.1:%s]\nexports:\n  - vol1=%s\n' "$port" "$T/vol1.img" \
		>"$T/etc/xprt/rtrs-server/t1.yaml"
	cmd=$(exec_start rtrs-server@.service t1)
	[[ $cmd == "$B/rtrs-server serve -c $T/etc/xprt/rtrs-server/t1.yaml --ctl $T/run/rtrs-server-t1.sock" ]] ||
		die "ExecStart: $cmd"
	# systemd runs it with a closed stdin and the journal on stdout/stderr
	$cmd </dev/null >"$T/out" 2>"$T/err" &
	BG_PIDS+=($!)
	local pid=$!
	for i in $(seq 1 100); do
		[ -S "$T/run/rtrs-server-t1.sock" ] && break
		sleep 0.05
	done
	head -c 64k /dev/urandom >"$T/pat"
	XDG_RUNTIME_DIR=$T run timeout 30 "$B/rtrs-client" write -s unit -p "tcp://127.0.0.1:$port" -d vol1 <"$T/pat"
	[ "$status" -eq 0 ] || die "write: $output $(cat "$T/err")"
	cmp "$T/pat" <(head -c 64k "$T/vol1.img")
	run "$B/rtrs-server" status --ctl "$T/run/rtrs-server-t1.sock"
	[ "$status" -eq 0 ] || die "status: $output"
	kill -TERM "$pid"
	local rc=0
	wait "$pid" || rc=$?
	[ "$rc" -eq 0 ] || die "rtrs-server exited $rc on SIGTERM: $(cat "$T/err")"
}

@test "ibcache-serve@.service: its ExecStart with the instance's variables serves, status answers" {
	local cmd pid i
	mkdir -p "$T/export"
	printf 'IBCACHE_SERVE_ARGS="-e %s -l udp://127.0.0.1:0"\n' "$T/export" >"$T/etc/xprt/ibcache-serve/t2.conf"
	cmd=$(exec_start ibcache-serve@.service t2)
	# EnvironmentFile=, then $VAR split at white space, as systemd does
	# shellcheck disable=SC1090
	source "$T/etc/xprt/ibcache-serve/t2.conf"
	cmd=${cmd//\$IBCACHE_SERVE_ARGS/$IBCACHE_SERVE_ARGS}
	$cmd </dev/null >"$T/out" 2>"$T/err" &
	pid=$!
	BG_PIDS+=($pid)
	for i in $(seq 1 100); do
		[ -S "$T/run/ibcache-serve-t2.sock" ] && break
		sleep 0.05
	done
	run "$B/ibcache-serve" status --ctl "$T/run/ibcache-serve-t2.sock"
	[ "$status" -eq 0 ] || die "status: $output $(cat "$T/err")"
	kill -TERM "$pid"
	local rc=0
	wait "$pid" || rc=$?
	[ "$rc" -eq 0 ] || die "ibcache-serve exited $rc on SIGTERM: $(cat "$T/err")"
}

@test "rtrs-client-map@.service: its ExecStart reads the example config; without a server it fails in one line" {
	local cmd port
	port=$(unused_tcp_port)
	sed "s|tcp://10.0.0.1, tcp://10.0.1.1|tcp://127.0.0.1:$port|" \
		"$BATS_TEST_DIRNAME/../../examples/rtrs-client.yaml" >"$T/etc/xprt/rtrs-client/vol1.yaml"
	cmd=$(exec_start rtrs-client-map@.service vol1)
	[[ $cmd == "$B/rtrs-client map --foreground -s vol1 -c $T/etc/xprt/rtrs-client/vol1.yaml --ctl $T/run/rtrs-client-vol1.sock" ]] ||
		die "ExecStart: $cmd"
	run --separate-stderr timeout 30 $cmd </dev/null
	[ "$status" -eq 1 ] || die "exit $status: $stderr"
	# no nbd driver on this host, or it is there and the server is not
	[[ $stderr == "rtrs-client map: the kernel's nbd driver is not there"* ||
		$stderr == "rtrs-client map: all paths to vol1 are down: "* ]] || die "$stderr"
	[ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
}
