#!/usr/bin/env bash
# mrc-testbed.sh: a real-kernel SRv6 leaf-spine fabric of network namespaces (issue 8).
#
#   mrc-testbed.sh up        build it (idempotent: a complete fabric is left as it is)
#   mrc-testbed.sh down      remove every namespace it made (idempotent)
#   mrc-testbed.sh status    namespaces, links, SIDs; exit 1 when the fabric is not complete
#   mrc-testbed.sh counters  bytes (rx, tx) of every spine interface, one line each
#   mrc-testbed.sh link SPINE LEAF up|down   take a leaf-spine link down or up again
#   mrc-testbed.sh loss PCT|off              random loss on the leaf1 -> host1 link (nftables)
#   mrc-testbed.sh exec NODE CMD...          run CMD in namespace mrctb-NODE
#   (MRCTB_PREFIX=mrctbX- selects another set of namespaces, for concurrent runs)
#
# Topology (derived here: the 2-host/2-leaf/4-spine case of the spine-leaf designer):
#   h0 - l0,  h1 - l1,  every leaf to every spine s0..s3. Namespaces are named mrctb-NODE;
#   nothing outside them is touched.
# Addresses (unique-local only):
#   host link i        fd00:6d72:63:1i::/64    leaf ::1, host ::2 (host0 = fd00:6d72:63:10::2)
#   leaf i - spine j   fd00:6d72:63:2ij::/64   leaf ::1, spine ::2
#   End SID of spine j fd00:6d72:63:e0j::/64,  of leaf i fd00:6d72:63:e1i::/64
#   uSID block fd00:75::/32 (16-bit uSIDs, NEXT-C-SID flavour, RFC 9800):
#     spine j uSID 0xe00j (fd00:75:e00j::/48), leaf i uSID 0xe10i (fd00:75:e10i::/48)
# Routes are static: a leaf reaches the other host's prefix by an ECMP route over the four
# spines hashed on the L4 5-tuple (fib_multipath_hash_policy=1): "plain routing".
# Steering: an SRH [spine j SID, leaf SID, host] or a uSID container
# fd00:75:e00j:e10i:: as active segment before the host pins a packet to spine j.
set -Eeuo pipefail

# Namespace prefix; MRCTB_PREFIX lets concurrent runs (tests, CI) use their own fabric. It
# must start with "mrctb" and be at most 10 characters, so nothing else is ever touched.
PFX=${MRCTB_PREFIX:-mrctb-}
[[ "$PFX" =~ ^mrctb[A-Za-z0-9_-]{0,5}$ ]] || { echo "mrc-testbed: MRCTB_PREFIX must match mrctb[A-Za-z0-9_-]{0,5}" >&2; exit 1; }
P=fd00:6d72:63
UB=fd00:75
# Jumbo frames as in a datacenter fabric: a 4096-byte mrc payload plus SRH fits unfragmented.
MTU=9000
HOSTS=(h0 h1)
LEAVES=(l0 l1)
SPINES=(s0 s1 s2 s3)
NODES=("${HOSTS[@]}" "${LEAVES[@]}" "${SPINES[@]}")

die() { echo "mrc-testbed: $*" >&2; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || die "must run as root (network namespaces, veth, seg6local)"; }
nsx() { local n=$1; shift; ip netns exec "$PFX$n" "$@"; }

exists() { [ -e "/run/netns/$PFX$1" ]; }

down() {
  local n
  for n in "${NODES[@]}"; do
    if exists "$n"; then ip netns del "$PFX$n"; fi
  done
}

sysctls() {
  local n=$1
  nsx "$n" sysctl -qw net.ipv6.conf.all.forwarding=1 net.ipv6.conf.all.seg6_enabled=1 \
    net.ipv6.conf.default.seg6_enabled=1 net.ipv6.conf.all.accept_dad=0 \
    net.ipv6.conf.default.accept_dad=0 net.ipv6.fib_multipath_hash_policy=1 \
    net.ipv6.conf.all.keep_addr_on_down=1 net.ipv6.conf.default.keep_addr_on_down=1
  nsx "$n" ip link set lo up
}

# link A IFA B IFB: a veth pair between namespaces, both ends up, seg6_enabled on both.
link() {
  ip link add name "$2" netns "$PFX$1" type veth peer name "$4" netns "$PFX$3"
  local x
  for x in "$1 $2" "$3 $4"; do
    set -- $x
    nsx "$1" sysctl -qw "net.ipv6.conf.$2.seg6_enabled=1" "net.ipv6.conf.$2.accept_dad=0"
    nsx "$1" ip link set dev "$2" mtu "$MTU" up
  done
}

addr() { nsx "$1" ip -6 addr add "$3" dev "$2" nodad; }
# pin A IFA ADDR B IFB: in A, a permanent neighbour entry for ADDR (B's end of the link) with
# B's MAC, so no packet of a run waits on (or is dropped during) neighbour discovery.
pin() { nsx "$1" ip -6 neigh replace "$3" lladdr "$(nsx "$4" cat "/sys/class/net/$5/address")" dev "$2" nud permanent; }
route() { local n=$1; shift; nsx "$n" ip -6 route add "$@"; }

# ECMP over the four spines from leaf i.
via_spines() {
  local i=$1 j args=()
  for j in 0 1 2 3; do args+=(nexthop via "$P:2$i$j::2" dev "s$j"); done
  echo "${args[@]}"
}

build() {
  local n i j o
  for n in "${NODES[@]}"; do ip netns add "$PFX$n"; sysctls "$n"; done
  for i in 0 1; do
    link "h$i" l "l$i" h
    addr "h$i" l "$P:1$i::2/64"
    addr "l$i" h "$P:1$i::1/64"
    route "h$i" fd00::/8 via "$P:1$i::1" dev l
    pin "h$i" l "$P:1$i::1" "l$i" h
    pin "l$i" h "$P:1$i::2" "h$i" l
    for j in 0 1 2 3; do
      link "l$i" "s$j" "s$j" "l$i"
      addr "l$i" "s$j" "$P:2$i$j::1/64"
      addr "s$j" "l$i" "$P:2$i$j::2/64"
      pin "l$i" "s$j" "$P:2$i$j::2" "s$j" "l$i"
      pin "s$j" "l$i" "$P:2$i$j::1" "l$i" "s$j"
    done
  done
  for i in 0 1; do
    o=$((1 - i))
    # shellcheck disable=SC2046
    route "l$i" "$P:1$o::/64" $(via_spines "$i")
    route "l$i" "$P:e1$o::/64" $(via_spines "$i")
    route "l$i" "$UB:e10$o::/48" $(via_spines "$i")
    for j in 0 1 2 3; do
      route "l$i" "$P:e0$j::/64" via "$P:2$i$j::2" dev "s$j"
      route "l$i" "$UB:e00$j::/48" via "$P:2$i$j::2" dev "s$j"
    done
    route "l$i" "$P:e1$i::/64" encap seg6local action End dev h
    route "l$i" "$UB:e10$i::/48" encap seg6local action End flavors next-csid lblen 32 nflen 16 dev h
  done
  for j in 0 1 2 3; do
    for i in 0 1; do
      route "s$j" "$P:1$i::/64" via "$P:2$i$j::1" dev "l$i"
      route "s$j" "$P:e1$i::/64" via "$P:2$i$j::1" dev "l$i"
      route "s$j" "$UB:e10$i::/48" via "$P:2$i$j::1" dev "l$i"
    done
    route "s$j" "$P:e0$j::/64" encap seg6local action End dev l0
    route "s$j" "$UB:e00$j::/48" encap seg6local action End flavors next-csid lblen 32 nflen 16 dev l0
  done
  # Prove the plain path and both steered forms before declaring success.
  local d
  for d in "$P:11::2" "$P:10::2"; do reach "$d" || die "no route to $d over the fabric"; done
}

# reach ADDR: a TCP connect from host0 (host1 for host0's address) to a closed port is
# answered by a RST ("refused") only if the packet got there and the answer came back.
# Bounded: 3 tries of 2 s.
reach() {
  local src=h0 t out
  [ "$1" = "$P:10::2" ] && src=h1
  for t in 1 2 3; do
    out=$(nsx "$src" timeout 2 bash -c "echo > /dev/tcp/$1/9" 2>&1 || true)
    case "$out" in *refused*) return 0 ;; esac
  done
  echo "mrc-testbed: $src -> $1: ${out:-timeout}" >&2
  return 1
}

complete() {
  local n
  for n in "${NODES[@]}"; do exists "$n" || return 1; done
  nsx h0 ip -6 route show fd00::/8 | grep -q via || return 1
  for n in "${SPINES[@]}"; do nsx "$n" ip -6 route show "$UB:e00${n#s}::/48" | grep -q seg6local || return 1; done
}

up() {
  if complete; then echo "mrc-testbed: already up"; return 0; fi
  down
  trap 'rc=$?; echo "mrc-testbed: build failed (exit $rc), cleaning up" >&2; down; exit $rc' ERR
  trap 'rc=$?; if [ $rc != 0 ]; then echo "mrc-testbed: build failed (exit $rc), cleaning up" >&2; down; fi' EXIT
  build
  trap - ERR EXIT
  echo "mrc-testbed: up (${#NODES[@]} namespaces ${PFX}*)"
}

status() {
  local n rc=0
  for n in "${NODES[@]}"; do
    if exists "$n"; then
      printf '%-10s %s\n' "$PFX$n" "$(nsx "$n" ip -br link show | grep -v '^lo' | awk '{printf "%s:%s ", $1, $2}')"
    else
      printf '%-10s missing\n' "$PFX$n"; rc=1
    fi
  done
  if [ $rc = 0 ]; then
    for n in "${LEAVES[@]}" "${SPINES[@]}"; do
      nsx "$n" ip -6 route show | grep seg6local | sed "s/^/$n: /"
    done
    complete || rc=1
  fi
  [ $rc = 0 ] && echo "mrc-testbed: complete" || echo "mrc-testbed: not complete"
  return $rc
}

counters() {
  local j i d
  for j in 0 1 2 3; do
    for i in 0 1; do
      d=/sys/class/net/l$i/statistics
      echo "s$j l$i rx_bytes $(nsx "s$j" cat $d/rx_bytes) tx_bytes $(nsx "s$j" cat $d/tx_bytes)"
    done
  done
}

setlink() {
  local s=$1 l=$2 state=$3
  [[ " ${SPINES[*]} " == *" $s "* && " ${LEAVES[*]} " == *" $l "* ]] || die "link SPINE LEAF up|down"
  nsx "$l" ip link set dev "$s" "$state"
}

loss() {
  local pct=$1
  command -v nft >/dev/null || die "nft not installed (apt-get install -y nftables)"
  nsx l1 nft delete table inet mrctb 2>/dev/null || true
  [ "$pct" = off ] && return 0
  [[ "$pct" =~ ^[0-9]+$ && "$pct" -le 100 ]] || die "loss PCT (0..100) or off"
  nsx l1 nft -f - <<EOF
table inet mrctb {
  chain loss {
    type filter hook forward priority 0; policy accept;
    oifname "h" numgen random mod 100 < $pct counter drop
  }
}
EOF
}

need_root
cmd=${1:-}
shift || true
case "$cmd" in
  up) up ;;
  down) down; echo "mrc-testbed: down" ;;
  status) status ;;
  counters) counters ;;
  link) [ $# = 3 ] || die "link SPINE LEAF up|down"; setlink "$@" ;;
  loss) [ $# = 1 ] || die "loss PCT|off"; loss "$1" ;;
  exec) [ $# -ge 2 ] || die "exec NODE CMD..."; n=$1; shift; nsx "$n" "$@" ;;
  *) die "usage: $0 up|down|status|counters|link SPINE LEAF up|down|loss PCT|off|exec NODE CMD..." ;;
esac
