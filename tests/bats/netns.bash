# Two "hosts" in network namespaces for multi-path and fault tests (two veth
# paths in 198.18.0.0/15, cut one, shape them; drop a share of the
# datagrams with nftables).  Only our own namespaces
# carry traffic.
#
#   netns_setup N          client and server namespaces joined by N veth
#                          pairs: path i = 198.18.i.1 (client) - 198.18.i.2 (server)
#   netns_cli CMD...       run CMD in the client namespace (netns_srv: server)
#   netns_cli_bg/srv_bg    the same in the background; the pid is in $!
#   netns_cut I            path I drops everything, both ways (a pulled cable:
#                          connections see silence, not errors)
#   netns_restore I        path I carries traffic again
#   netns_shape I RATE     token bucket of RATE (tc syntax, e.g. 200mbit) on
#                          both ends of path I
#   netns_drop PCT         every path drops PCT % of the UDP datagrams that
#                          arrive, at both ends (nftables numgen random)
#   netns_teardown         removes everything (teardown() calls it)
#
# netns_available says whether this machine lets us (root, iproute2, veth);
# callers skip with that reason when it does not (CI runs as root).

NS_ID=${NS_ID:-$$}
NS_CLI="xt-cli-$NS_ID"
NS_SRV="xt-srv-$NS_ID"
NS_PATHS=0

netns_available() {
	[ "$(id -u)" = 0 ] || return 1
	command -v ip >/dev/null || return 1
	ip netns add "xt-probe-$NS_ID" 2>/dev/null || return 1
	ip netns del "xt-probe-$NS_ID"
}

netns_addr() { echo "198.18.$1.$2"; }	# PATH 1=client 2=server
netns_cli() { ip netns exec "$NS_CLI" "$@"; }
netns_srv() { ip netns exec "$NS_SRV" "$@"; }
netns_cli_bg() { ip netns exec "$NS_CLI" "$@" & }
netns_srv_bg() { ip netns exec "$NS_SRV" "$@" & }

# veth names: at most 15 characters
_ns_dev() { echo "x${1}${NS_ID: -6}$2"; }	# c|s, path

netns_setup() {
	local n=$1 i c s
	ip netns add "$NS_CLI" && ip netns add "$NS_SRV" || die "cannot create network namespaces"
	ip -n "$NS_CLI" link set lo up
	ip -n "$NS_SRV" link set lo up
	for ((i = 0; i < n; i++)); do
		c=$(_ns_dev c "$i") s=$(_ns_dev s "$i")
		ip link add "$c" netns "$NS_CLI" type veth peer name "$s" netns "$NS_SRV" ||
			die "cannot create veth pair $c/$s"
		ip -n "$NS_CLI" addr add "$(netns_addr "$i" 1)/24" dev "$c"
		ip -n "$NS_SRV" addr add "$(netns_addr "$i" 2)/24" dev "$s"
		ip -n "$NS_CLI" link set "$c" up
		ip -n "$NS_SRV" link set "$s" up
	done
	NS_PATHS=$n
}

# nftables rather than netem: sch_netem is a module many kernels lack.
_ns_cut_rules() {	# ns dev table
	ip netns exec "$1" nft -f - <<-EOF
	table netdev $3 {
		chain in { type filter hook ingress device "$2" priority 0; drop; }
		chain out { type filter hook egress device "$2" priority 0; drop; }
	}
	EOF
}

netns_cut() {
	command -v nft >/dev/null || die "nft missing: scripts/install-deps"
	_ns_cut_rules "$NS_CLI" "$(_ns_dev c "$1")" "xtcut$1"
	_ns_cut_rules "$NS_SRV" "$(_ns_dev s "$1")" "xtcut$1"
}

netns_restore() {
	ip netns exec "$NS_CLI" nft delete table netdev "xtcut$1" 2>/dev/null
	ip netns exec "$NS_SRV" nft delete table netdev "xtcut$1" 2>/dev/null
	return 0
}

netns_shape() {
	local q="tbf rate $2 burst 64kb latency 50ms"
	ip netns exec "$NS_CLI" tc qdisc replace dev "$(_ns_dev c "$1")" root $q
	ip netns exec "$NS_SRV" tc qdisc replace dev "$(_ns_dev s "$1")" root $q
}

# Ingress at both ends: a drop in the sender's output hook would come back
# to it as EPERM (and it would just send again), not as loss on the wire.
netns_drop() {
	command -v nft >/dev/null || die "nft missing: scripts/install-deps"
	local i
	for ((i = 0; i < NS_PATHS; i++)); do
		_ns_drop_rules "$NS_CLI" "$(_ns_dev c "$i")" "$1" "$i"
		_ns_drop_rules "$NS_SRV" "$(_ns_dev s "$i")" "$1" "$i"
	done
}

_ns_drop_rules() {	# ns dev pct path
	ip netns exec "$1" nft -f - <<-EOF
	table netdev xtdrop$4 {
		chain in { type filter hook ingress device "$2" priority 0; meta l4proto udp numgen random mod 100 < $3 drop; }
	}
	EOF
}

netns_teardown() {
	ip netns pids "$NS_CLI" 2>/dev/null | xargs -r kill -9 2>/dev/null
	ip netns pids "$NS_SRV" 2>/dev/null | xargs -r kill -9 2>/dev/null
	ip netns del "$NS_CLI" 2>/dev/null
	ip netns del "$NS_SRV" 2>/dev/null
	return 0
}
