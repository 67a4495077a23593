#!/usr/bin/env bats
#
# mkshmcon connect as a pipe under randomized use and abuse: both
# directions at once, sizes from 0 to several MiB, stream and -M, inputs
# that start late, pause or end at once, slow readers, and SIGKILL,
# SIGTERM or SIGHUP of one end mid-transfer (tests/mkshmcon-trials says
# what each trial draws and which invariants it checks).
# MKSHMCON_TRIALS raises the number of trials; MKSHMCON_SEED replays.

bats_require_minimum_version 1.5.0

load helpers

@test "connect: randomized two-way pipe trials keep outputs exact and exit statuses true" {
	command -v python3 >/dev/null || skip "python3 not installed: the trial driver is a python script"
	run --separate-stderr timeout 900 python3 "$BATS_TEST_DIRNAME/../mkshmcon-trials" \
		-n "${MKSHMCON_TRIALS:-40}"
	if [ "$status" -ne 0 ]; then
		printf '%s\n' "$stderr" >&2
		die "trials failed (status $status); replay a seed with: MKSHMCON=$MKSHMCON tests/mkshmcon-trials -s SEED -n 1 -v"
	fi
	# the seed is printed so a run can be repeated
	[[ $stderr == *"trials from seed "* ]]
	[[ $stderr == *"0 of ${MKSHMCON_TRIALS:-40} trials failed"* ]]
}
