#!/usr/bin/env bats
# ibcache-serve and ibcache-fetch over ud:// -- run inside tests/vm/xprt-vm
# (Soft-RoCE rxe0 on 10.200.0.1) by tests/vm/run-tests; the same checks the
# host runs over udp:// in tests/bats/ibcache.bats: per-request QPs with
# their receives posted before the request, a Q_Key per request, a reset
# after a short reply.

bats_require_minimum_version 1.5.0
load ../bats/ibcache_helpers

IP=${XPRT_VM_IP:-10.200.0.1}
F=$IBCACHE_FETCH
S=$IBCACHE_SERVE

@test "ud: byte-exact fetches across sizes and offsets, all from the peer" {
	for size in 0 1 4097 1048699 3145728; do
		mkdata "f$size" "$size"
	done
	start_serve "ud://$IP:0"
	[[ ${URIS[0]} == ud://$IP:* ]]
	# all from the peer: a slow answer (ASan under emulation, a loaded
	# host) is waited for rather than reaped and taken from the origin
	for size in 0 1 4097 1048699 3145728; do
		fetch_to "$BATS_TEST_TMPDIR/o" 0 -p "${URIS[0]}" --origin "$ORG/f$size" "f$size" \
			--timeout 5000
		same "$BATS_TEST_TMPDIR/o" "$ORG/f$size"
		[ "$(stat_of origin_pages)" -eq 0 ] || die "size $size: $(stat_of origin_pages) origin pages"
		[ "$(stat_of peer_pages)" -eq $(( (size + 4095) / 4096 )) ]
	done
	for ol in "1 1" "4095 2" "100 300000" "3000000 1000000"; do
		set -- $ol
		fetch_to "$BATS_TEST_TMPDIR/o" 0 -p "${URIS[0]}" --origin "$ORG/f3145728" f3145728 \
			--offset "$1" --length "$2"
		slice "$ORG/f3145728" "$1" "$2" >"$BATS_TEST_TMPDIR/want"
		same "$BATS_TEST_TMPDIR/o" "$BATS_TEST_TMPDIR/want"
	done
	fetch_to "$BATS_TEST_TMPDIR/o" 0 -p "${URIS[0]}" --origin "$ORG/f3145728" f3145728 --pages 1,3-5,700
	{ slice "$ORG/f3145728" 4096 4096; slice "$ORG/f3145728" 12288 12288; slice "$ORG/f3145728" 2867200 4096; } \
		>"$BATS_TEST_TMPDIR/want"
	same "$BATS_TEST_TMPDIR/o" "$BATS_TEST_TMPDIR/want"
	# the MTU is the port's: 1024 on rxe over this netdev
	run_tool 0 "$S" status --ctl "$SRV_CTL" -o json
	python3 -c 'import json,sys; l=json.loads(sys.argv[1])["listeners"][0]; assert l["mtu"] in (256,512,1024,2048,4096), l' "$output"
}

@test "ud: missing pages from the origin; the QP is reset after each short reply" {
	head -c 409600 /dev/urandom >"$ORG/s"
	sparse_copy "$ORG/s" "$EXP/s" 0-2 4-9 13-49 51-98
	start_serve "ud://$IP:0"
	fetch_to "$BATS_TEST_TMPDIR/o" 0 -p "${URIS[0]}" --origin "$ORG/s" s
	same "$BATS_TEST_TMPDIR/o" "$ORG/s"
	[ "$(stat_of origin_pages)" -eq 6 ] || die "origin pages: $(stat_of origin_pages)"
	[ "$(stat_of peer_pages)" -eq 94 ]
	# each short reply left receive WRs posted: reset, not reused as is
	[ "$(stat_of resets)" -ge "$(stat_of short_replies)" ]
	[ "$(stat_of short_replies)" -ge 4 ]
}

@test "ud: stale generation, and a peer that is not there" {
	mkdata g 100000
	start_serve "ud://$IP:0"
	printf 'X' | dd of="$EXP/g" bs=1 seek=5000 conv=notrunc 2>/dev/null
	fetch_to "$BATS_TEST_TMPDIR/o" 0 -p "${URIS[0]}" --origin "$ORG/g" g
	same "$BATS_TEST_TMPDIR/o" "$ORG/g"
	[ "$(stat_of peer_pages)" -eq 0 ]
	expect_stderr_line "ibcache-fetch: ${URIS[0]}: its copy of g is another generation (stale); its pages come from the next source"
	# nobody on that port: SIDR says so at once
	fetch_to "$BATS_TEST_TMPDIR/o" 0 -p "ud://$IP:9" --origin "$ORG/g" g
	same "$BATS_TEST_TMPDIR/o" "$ORG/g"
	expect_stderr_match "ud://$IP:9: .*; going on without that peer"
	[ "$(stat_of origin_pages)" -eq 25 ]
}

@test "ud and udp peers together, two of them, by rendezvous" {
	head -c 1048576 /dev/urandom >"$ORG/r"
	sparse_copy "$ORG/r" "$BATS_TEST_TMPDIR/e1/r" 0-127 200-255
	sparse_copy "$ORG/r" "$BATS_TEST_TMPDIR/e2/r" 64-199
	start_serve -e "$BATS_TEST_TMPDIR/e1" "ud://$IP:0" "udp://$IP:0"
	local ud1=${URIS[0]} udp1=${URIS[1]} c1=$SRV_CTL
	start_serve -e "$BATS_TEST_TMPDIR/e2" "ud://$IP:0"
	local ud2=${URIS[0]} c2=$SRV_CTL
	# all from the peers: a slow answer (ASan under emulation) is waited
	# for rather than reaped and taken from the origin
	fetch_to "$BATS_TEST_TMPDIR/o" 0 -p "$ud1" -p "$ud2" --origin "$ORG/r" r --block 16k \
		--timeout 5000
	same "$BATS_TEST_TMPDIR/o" "$ORG/r"
	[ "$(stat_of origin_pages)" -eq 0 ]
	[ "$(srv_status pages_sent "$c1")" -gt 0 ] && [ "$(srv_status pages_sent "$c2")" -gt 0 ]
	# one peer over udp, the other over ud: the same pages
	fetch_to "$BATS_TEST_TMPDIR/o" 0 -p "$udp1" -p "$ud2" --origin "$ORG/r" r --block 16k \
		--timeout 5000
	same "$BATS_TEST_TMPDIR/o" "$ORG/r"
	[ "$(stat_of origin_pages)" -eq 0 ]
}
