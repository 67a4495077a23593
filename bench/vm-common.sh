# Sourced by the bench/vm-* scripts (inside tests/vm/xprt-vm, from the
# repository root): the guest's Soft-RoCE device, its RoCEv2 GID index for
# perftest (-x), and the helpers they share.
IP=${XPRT_VM_IP:-10.200.0.1}
DEV=${XPRT_VM_DEV:-rxe0}
GIDX=$(ibv_devinfo -v -d "$DEV" 2>/dev/null | awk '/GID\[/ && /::ffff:/ { gsub(/[^0-9]/, "", $1); print $1; exit }')
GIDX=${GIDX:-1}

# median VALUE...
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# jget JSON a.b.c -> that field
jget() { python3 -c 'import json,sys
v=json.loads(sys.argv[1])
for k in sys.argv[2].split("."): v=v[k]
print(v)' "$1" "$2"; }
