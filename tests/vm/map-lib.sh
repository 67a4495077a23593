# What tests/vm/rtrs-map.sh (kernel nbd) and tests/vm/rtrs-ublk.sh (ublk)
# share: one rtrs-server on a file, and the checks every kind of mapped
# device must pass.  Source it after tap.sh, with CLT, SRV and T set and
# the backing file at $T/disk.img.
#
#   server                      rtrs-server on 0.0.0.0:1300 exporting d1 (SRV_PID)
#   fio_verify DEV LABEL        fio randrw with crc32c verify, two jobs, no error
#   term_under_load DEV PID GONE...
#                               SIGTERM to the serving PID under a full queue:
#                               it ends, and GONE... (a command) comes true
#   cut_under_fio DEV SESSION   fio write+verify while path 1 is cut and restored
#   server_dies DEV SESSION SECS
#                               the server killed: a read fails with EIO within
#                               SECS, not a hang; the server back, the session
#                               reconnects and reads are byte-exact again
#   bail                        the last of dmesg, then finish (the caller's)

bail() { echo "# dmesg:"; dmesg | tail -n 30 | sed 's/^/#   /'; finish; }
gone() { ! kill -0 "$1" 2>/dev/null; }

server() {
	"$SRV" -l tcp://0.0.0.0:1300 -e "d1=$T/disk.img" --ctl "$T/srv.sock" >"$T/srv.out" 2>"$T/srv.err" &
	SRV_PID=$!
	wait_for 100 grep -q '^listening' "$T/srv.out"
}

fio_verify() {
	check "fio randrw with verify$2" fio --name=mc --filename="$1" --direct=1 \
		--ioengine=libaio --rw=randrw --bs=4k --iodepth=32 --numjobs=2 --size=64M \
		--offset_increment=64M --verify=crc32c --verify_state_save=0 --verify_fatal=1 \
		--output="$T/fio0.out"
	grep -q "err= 0" "$T/fio0.out" || sed 's/^/#   /' "$T/fio0.out"
}

term_under_load() {
	local dev=$1 pid=$2 fp
	shift 2
	fio --name=busy --filename="$dev" --direct=1 --ioengine=libaio --rw=randwrite --bs=64k \
		--iodepth=64 --size=128M --time_based --runtime=20 --output="$T/fio-busy.out" \
		>/dev/null 2>&1 &
	fp=$!
	sleep 2
	check "SIGTERM under a full queue" kill -TERM "$pid"
	check "the serving process ends, it does not hang" wait_for 400 gone "$pid"
	check "the device is let go" wait_for 50 "$@"
	wait "$fp" 2>/dev/null
}

cut_under_fio() {
	local fp
	fio --name=cut --filename="$1" --direct=1 --ioengine=libaio --rw=randwrite --bs=16k \
		--iodepth=32 --size=128M --verify=crc32c --verify_state_save=0 --verify_backlog=256 \
		--verify_fatal=1 --time_based --runtime="$FIO_TIME" --output="$T/fio.out" &
	fp=$!
	sleep 2
	check "path 1 cut" "$CLT" path disconnect -s "$2" 1
	sleep 1
	check "path 1 back" "$CLT" path reconnect -s "$2" 1
	check "fio write+verify across the cut: no error" wait "$fp"
	grep -q "err= 0" "$T/fio.out" || sed 's/^/#   /' "$T/fio.out"
	check "both paths connected again" wait_for 100 eval \
		"\"$CLT\" status -s $2 -o json >$T/s.json && jtrue $T/s.json 'all(p[\"state\"] == \"connected\" for p in d[\"paths\"])'"
}

server_dies() {
	local s
	kill -9 "$SRV_PID"
	wait "$SRV_PID" 2>/dev/null
	SRV_PID=
	s=$SECONDS
	check "a read with the server gone fails (EIO)" eval \
		"! timeout 60 dd if=$1 of=/dev/null bs=4k count=1 skip=777 iflag=direct 2>$T/dd.err && grep -q 'Input/output error' $T/dd.err"
	check "within $3 s (the down timeout and the driver's retries), not a hang ($((SECONDS - s)) s)" \
		[ $((SECONDS - s)) -lt "$3" ]
	check "rtrs-server again" server
	check "the session reconnects" wait_for 200 eval \
		"\"$CLT\" status -s $2 -o json >$T/s.json && jtrue $T/s.json 'd[\"paths\"][0][\"state\"] == \"connected\"'"
	check "reads work again, byte for byte" eval \
		"cmp <(dd if=$1 bs=1M count=16 iflag=direct status=none) <(head -c 16M $T/disk.img)"
}
