#!/usr/bin/env bats
# The README's first command ends in `make demo`: it must run to the end.

bats_require_minimum_version 1.5.0

@test "the loopback demo runs and passes" {
	local b
	b=$(dirname "${MKSHMCON:-$BATS_TEST_DIRNAME/../../build/mkshmcon}")
	cd "$BATS_TEST_DIRNAME/../.."
	run --separate-stderr timeout 300 env B="$b" demo/demo.sh
	if [ "$status" -ne 0 ]; then
		printf '# %s\n' "${lines[@]}" "${stderr}"
		return 1
	fi
	[[ ${lines[-1]} == "demo passed" ]]
	[[ $output == *"received intact"* ]]
	[[ $output == *"No RDMA device found"* || $output == *ACTIVE* ]]
	[[ $output == *"5 sent, 5 received"* ]]
	# a sparse peer copy lacks pages 100-199: those, and only those, from the origin
	[[ $output == *"byte-exact: 1948 pages from the peer, 100 from the origin"* ]]
}
