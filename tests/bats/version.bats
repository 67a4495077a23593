#!/usr/bin/env bats
# Every tool answers --version and -V on stdout, exit 0: its name, xprt's
# version (git describe of the build's checkout, or the VERSION file) and
# the protocol versions it speaks.

bats_require_minimum_version 1.5.0

setup() {
	B=$(dirname "${MKSHMCON:-$BATS_TEST_DIRNAME/../../build/mkshmcon}")
	case $B in /*) ;; *) B=$PWD/$B ;; esac
}

# version TOOL PROTOCOLS: --version and -V of TOOL print one line
# "TOOL VERSION (PROTOCOLS)", the same for both.
version() {
	local flag first=
	for flag in --version -V; do
		run --separate-stderr "$B/$1" "$flag"
		[ "$status" -eq 0 ] || { echo "# $1 $flag: rc $status, $stderr"; return 1; }
		[ -z "$stderr" ]
		[ "${#lines[@]}" -eq 1 ]
		[[ $output =~ ^$1\ [^\ ]+\ \((.*)\)$ ]] || { echo "# $1 $flag: $output"; return 1; }
		[ "${BASH_REMATCH[1]}" = "$2" ] || { echo "# $1 $flag: protocols '${BASH_REMATCH[1]}'"; return 1; }
		[ -z "$first" ] || [ "$output" = "$first" ]
		first=$output
	done
}

@test "every tool answers --version and -V with its version and protocols" {
	version mkshmcon "SHMCM over mailbox version 1, with CON_FIN"
	version rtrs-client "RTRS 2.0, RNBD 2"
	version rtrs-server "RTRS 2.0, RNBD 2"
	version xprobe "GM-style ports version 2, xprobe messages version 1"
	version ibcache-serve "gfcc rpc2 over UD and UDP, extensions version 1"
	version ibcache-fetch "gfcc rpc2 over UD and UDP, extensions version 1"
	ln -s "$B/mkshmcon" "$BATS_TEST_TMPDIR/rmshmcon"
	B=$BATS_TEST_TMPDIR version rmshmcon "SHMCM over mailbox version 1, with CON_FIN"
}

@test "the version is the checkout's git describe, or the VERSION file's" {
	local want
	cd "$BATS_TEST_DIRNAME/../.."
	want=$(git describe --tags --always --dirty 2>/dev/null || cat VERSION 2>/dev/null || echo unknown)
	run "$B/mkshmcon" --version
	# the build may predate the last commit or edit: compare the commit part
	[[ ${output#mkshmcon } == "${want%-dirty}"* ]] || [[ $want == "unknown" ]] ||
		{ echo "# built: $output; checkout: $want"; return 1; }
}
