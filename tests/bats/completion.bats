#!/usr/bin/env bats
# The bash completion (completions/xprt.bash) over the tools being tested:
# commands, options, the fixed values of options, mkshmcon's connections.

bats_require_minimum_version 1.5.0

setup() {
	B=$(dirname "${MKSHMCON:-$BATS_TEST_DIRNAME/../../build/mkshmcon}")
	case $B in /*) ;; *) B=$PWD/$B ;; esac
	PATH=$B:$PATH
	# shellcheck source=../../completions/xprt.bash
	source "$BATS_TEST_DIRNAME/../../completions/xprt.bash"
}

# complete WORD...: the completions of the last word, one line
complete_line() {
	COMP_WORDS=("$@")
	COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
	COMPREPLY=()
	_xprt
	echo "${COMPREPLY[*]}"
}

# expect WANT WORD...: the completions are exactly WANT
expect() {
	local want=$1 got
	shift
	got=$(complete_line "$@")
	[ "$got" = "$want" ] || { echo "# [$*]: got '$got', want '$want'"; return 1; }
}

@test "completion: every tool's commands" {
	expect "create connect status list rm help" mkshmcon ""
	expect "read write bench nbd map unmap list-mapped status path set reset-stats help" rtrs-client ""
	expect "serve status" rtrs-server s
	expect "disconnect" rtrs-server di
	expect "devices serve ping bw help" xprobe ""
	expect "add remove disconnect reconnect" rtrs-client path ""
}

@test "completion: options, and the values of options with fixed choices" {
	expect "a b" mkshmcon connect c1 -x ""
	expect "wait defer" mkshmcon connect c1 --flow ""
	expect "--flow" mkshmcon connect c1 --fl
	expect "text yaml json" mkshmcon status -o ""
	expect "read write randread randwrite randrw" rtrs-client bench --rw ""
	expect "rr min-inflight min-latency" rtrs-client bench --policy ""
	expect "rr min-inflight min-latency" rtrs-client set --policy ""
	expect "ro rw migration" rtrs-client read --access ""
	expect "--down-timeout" rtrs-client read --down
	expect "on off" rtrs-server --always-invalidate ""
	expect "--allow --always-invalidate" rtrs-server --al
	expect "low high" xprobe ping tcp://h:1 --prio ""
	expect "--mtu" ibcache-serve --mt
	expect "text yaml json" ibcache-fetch -o ""
	# a value that cannot be guessed: nothing offered
	expect "" rtrs-client bench -s ""
	expect "" mkshmcon create c1 -n ""
}

@test "completion: mkshmcon's connections by name" {
	local n=cmpl-$$
	"$B/mkshmcon" create "$n-one" -q
	"$B/mkshmcon" create "$n-two" -q
	expect "$n-one $n-two" mkshmcon status "$n-"
	expect "$n-one" mkshmcon connect "$n-o"
	expect "$n-one $n-two" rmshmcon "$n-"
	"$B/mkshmcon" rm "$n-one" "$n-two"
}

@test "completion: every option a tool's --help names is offered" {
	local t c opts got
	for t in "mkshmcon connect" "mkshmcon create" "rtrs-client bench" "rtrs-client read" \
		 "xprobe ping" "xprobe bw"; do
		opts=$("$B/${t%% *}" "${t#* }" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u)
		got=$(complete_line ${t%% *} ${t#* } x --)
		for c in $opts; do
			[[ " $got " == *" $c "* ]] || { echo "# $t: $c not offered ($got)"; return 1; }
		done
	done
}
