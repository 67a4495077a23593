# What the VM test scripts share: TAP lines counted in n (and failures in
# bad), one check per command with its stderr shown on failure ($T must be
# a directory), polling, and JSON conditions.  Sourced, not run.

n=0 bad=0
ok() { n=$((n + 1)); echo "ok $n $*"; }
notok() { n=$((n + 1)) bad=$((bad + 1)); echo "not ok $n $*"; }
check() {	# NAME CMD...
	local name=$1; shift
	if "$@" 2>"$T/err"; then ok "$name"; else notok "$name"; sed 's/^/#   /' "$T/err"; return 1; fi
}
wait_for() {	# TENTHS CMD...: until CMD succeeds, at most TENTHS tenths of a second
	local i
	for ((i = 0; i < $1; i++)); do "${@:2}" && return 0; sleep 0.1; done
	"${@:2}"
}
# tap_finish NAME: the last check (no kernel BUG or WARNING in dmesg), the
# plan, and "NAME: PASS (N checks)" or "NAME: FAIL (B of N checks failed)";
# exits 0 or 1.
tap_finish() {
	if dmesg | grep -E 'BUG:|WARNING:|Oops|general protection|Call Trace' >"$T/oops"; then
		notok "no kernel BUG/WARNING"; sed 's/^/#   /' "$T/oops" | head -n 40
	else
		ok "no kernel BUG/WARNING"
	fi
	echo "1..$n"
	if [ $bad -eq 0 ]; then echo "$1: PASS ($n checks)"; exit 0; fi
	echo "$1: FAIL ($bad of $n checks failed)"; exit 1
}
json() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"; }
into() { local f=$1; shift; "$@" > "$f"; }	# FILE CMD...: CMD's stdout to FILE
jtrue() { [ "$(json "$@")" = True ]; }	# FILE EXPR: EXPR over the JSON d is true
