#!/usr/bin/env bash
# mrc-testbed.sh: a real-kernel SRv6 leaf-spine fabric of network namespaces (issue 8),
# built from the spine-leaf designer's output.
#
#   mrc-testbed.sh up [DESIGN FLAGS]  build it (idempotent: a complete fabric is left as it
#                                     is); DESIGN FLAGS go to `mrc-sim testbed-plan`
#                                     (--gpus, --gpus-per-server, --leaf-radix, ...)
#   mrc-testbed.sh down      remove every namespace it made (idempotent)
#   mrc-testbed.sh status    namespaces, links, SIDs; exit 1 when the fabric is not complete
#   mrc-testbed.sh plan      the plan it was built from (JSON)
#   mrc-testbed.sh counters  bytes (rx, tx) of every spine interface, one line each
#   mrc-testbed.sh link SPINE LEAF up|down   take a leaf-spine link down or up again
#   mrc-testbed.sh loss PCT|off [HOST]       random loss on the leaf -> HOST link (nftables;
#                                            default the last host)
#   mrc-testbed.sh exec NODE CMD...          run CMD in namespace mrctb-NODE
#   mrc-testbed.sh kernel    whether this kernel can build the fabric (SRv6 lightweight
#                            tunnels: encap seg6, seg6local End, NEXT-C-SID), tried in a
#                            scratch namespace; exit 3 with the reason when it cannot
#                            (`up` checks this first)
#   (MRCTB_PREFIX=mrctbX- selects another set of namespaces, for concurrent runs)
#
# The plan: `mrc-sim testbed-plan --json -` (examples/src/testbed.rs) turns the designer's
# output (default: 8 GPUs, 4 per server, 8-port leaves, 2-port spines -> 2 hosts, 2
# leaves, 4 spines) into namespaces, links, addresses, SIDs and steering tables; this
# script builds exactly that (jq reads it). mrc-sim is $MRCTB_SIM, else the newer of
# target/release and target/debug of this checkout; MRCTB_PLAN=FILE takes a plan file instead. `up` keeps the
# plan in /run/mrctb/PREFIXplan.json for the other commands.
# Addresses are unique-local only (fd00:6d72:63::/48, uSID block fd00:75::/32); routes
# are static. Plain routing: a leaf reaches every other leaf's hosts by an ECMP route over
# all spines hashed on the L4 5-tuple (fib_multipath_hash_policy=1). Steering: an SRH
# [spine SID, leaf SID, host] or a uSID container fd00:75:<spine>:<leaf>:: before the host
# pins a packet to one spine; End (and End with NEXT-C-SID for uSIDs) on every switch.
# In each host, the plan's steering tables (one per mode and spine, selected by a
# firewall mark) add that header in the kernel: `mrc-perf --srv6 MODE --srv6-via route`.
set -Eeuo pipefail

# Namespace prefix; MRCTB_PREFIX lets concurrent runs (tests, CI) use their own fabric. It
# must start with "mrctb" and be at most 10 characters, so nothing else is ever touched.
PFX=${MRCTB_PREFIX:-mrctb-}
[[ "$PFX" =~ ^mrctb[A-Za-z0-9_-]{0,5}$ ]] || { echo "mrc-testbed: MRCTB_PREFIX must match mrctb[A-Za-z0-9_-]{0,5}" >&2; exit 1; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE=/run/mrctb
SAVED=$STATE/${PFX}plan.json

die() { echo "mrc-testbed: $*" >&2; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || die "must run as root (network namespaces, veth, seg6local)"; }
nsx() { local n=$1; shift; ip netns exec "$PFX$n" "$@"; }
exists() { [ -e "/run/netns/$PFX$1" ]; }
command -v jq >/dev/null || die "jq not installed (apt-get install -y jq)"

# make_plan [DESIGN FLAGS]: the plan JSON on stdout.
make_plan() {
  if [ -n "${MRCTB_PLAN:-}" ]; then cat "$MRCTB_PLAN"; return; fi
  local sim=${MRCTB_SIM:-}
  if [ -z "$sim" ]; then
    # The newer of the release and debug builds.
    sim=$(ls -t "${CARGO_TARGET_DIR:-$ROOT/target}/release/mrc-sim" "${CARGO_TARGET_DIR:-$ROOT/target}/debug/mrc-sim" 2>/dev/null | head -1 || true)
  fi
  [ -n "$sim" ] || die "no mrc-sim (cargo build -p mrc-examples --bin mrc-sim, or MRCTB_SIM=PATH)"
  "$sim" testbed-plan --json - "$@"
}

# PLAN holds the plan's JSON; q FILTER runs jq -r on it.
PLAN=""
q() { jq -r "$1" <<<"$PLAN"; }
load_saved() { [ -f "$SAVED" ] || die "no fabric with prefix $PFX (run up first)"; PLAN=$(cat "$SAVED"); load_names; }
load_names() {
  mapfile -t HOSTS < <(q '.hosts[].name')
  mapfile -t LEAVES < <(q '.leaves[].name')
  mapfile -t SPINES < <(q '.spines[].name')
  NODES=("${HOSTS[@]}" "${LEAVES[@]}" "${SPINES[@]}")
}

# down: every namespace of this prefix named like a plan node (h<n>, l<n>, s<n>), with or
# without a saved plan, then the saved plan.
down() {
  local f
  for f in /run/netns/"$PFX"*; do
    [ -e "$f" ] || continue
    f=${f##*/}
    [[ "${f#"$PFX"}" =~ ^[hls][0-9]+$ ]] && ip netns del "$f"
  done
  rm -f "$SAVED"
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

# ECMP from leaf i over every spine.
via_spines() {
  q ".links[] | select(.leaf == $1) | \"nexthop via \(.spine_addr) dev \(.leaf_ifname)\"" | tr '\n' ' '
}

build() {
  local n h leaf ifn a gw lif i j la sa lif2 sif sid us mark table dst segs
  MTU=$(q .mtu_bytes)
  for n in "${NODES[@]}"; do ip netns add "$PFX$n"; sysctls "$n"; done
  # Hosts: one link to their leaf, a default route into the fabric.
  while read -r h leaf ifn a gw lif; do
    link "$h" "$ifn" "l$leaf" "$lif"
    addr "$h" "$ifn" "$a/64"
    addr "l$leaf" "$lif" "$gw/64"
    route "$h" fd00::/8 via "$gw" dev "$ifn"
    pin "$h" "$ifn" "$gw" "l$leaf" "$lif"
    pin "l$leaf" "$lif" "$a" "$h" "$ifn"
  done < <(q '.hosts[] | "\(.name) \(.leaf) \(.ifname) \(.addr) \(.gateway) \(.leaf_ifname)"')
  # Leaf-spine links.
  while read -r i j lif la sif sa; do
    link "l$i" "$lif" "s$j" "$sif"
    addr "l$i" "$lif" "$la/64"
    addr "s$j" "$sif" "$sa/64"
    pin "l$i" "$lif" "$sa" "s$j" "$sif"
    pin "s$j" "$sif" "$la" "l$i" "$lif"
  done < <(q '.links[] | "\(.leaf) \(.spine) \(.leaf_ifname) \(.leaf_addr) \(.spine_ifname) \(.spine_addr)"')
  # Leaves: other leaves' hosts and SIDs by ECMP over the spines; each spine's SIDs over
  # its link; their own SIDs as End towards (any of) their hosts.
  local nl ns
  nl=$(q '.leaves | length'); ns=$(q '.spines | length')
  for ((i = 0; i < nl; i++)); do
    local first_host
    first_host=$(q "[.hosts[] | select(.leaf == $i)][0].leaf_ifname")
    while read -r h a; do
      route "l$i" "$a/64" $(via_spines "$i")
    done < <(q ".hosts[] | select(.leaf != $i) | \"\(.name) \(.addr)\"")
    while read -r sid us; do
      route "l$i" "$sid/64" $(via_spines "$i")
      route "l$i" "$us/48" $(via_spines "$i")
    done < <(q ".leaves[] | select(.name != \"l$i\") | \"\(.sid) \(.usid_prefix)\"")
    while read -r j sa lif; do
      route "l$i" "$(q ".spines[$j].sid")/64" via "$sa" dev "$lif"
      route "l$i" "$(q ".spines[$j].usid_prefix")/48" via "$sa" dev "$lif"
    done < <(q ".links[] | select(.leaf == $i) | \"\(.spine) \(.spine_addr) \(.leaf_ifname)\"")
    route "l$i" "$(q ".leaves[$i].sid")/64" encap seg6local action End dev "$first_host"
    route "l$i" "$(q ".leaves[$i].usid_prefix")/48" encap seg6local action End flavors next-csid lblen 32 nflen 16 dev "$first_host"
  done
  # Spines: every host and leaf SID over the link to its leaf; their own SIDs as End.
  for ((j = 0; j < ns; j++)); do
    while read -r a leaf; do
      route "s$j" "$a/64" via "$(q ".links[] | select(.leaf == $leaf and .spine == $j) | .leaf_addr")" dev "l$leaf"
    done < <(q '.hosts[] | "\(.addr) \(.leaf)"')
    for ((i = 0; i < nl; i++)); do
      la=$(q ".links[] | select(.leaf == $i and .spine == $j) | .leaf_addr")
      route "s$j" "$(q ".leaves[$i].sid")/64" via "$la" dev "l$i"
      route "s$j" "$(q ".leaves[$i].usid_prefix")/48" via "$la" dev "l$i"
    done
    route "s$j" "$(q ".spines[$j].sid")/64" encap seg6local action End dev l0
    route "s$j" "$(q ".spines[$j].usid_prefix")/48" encap seg6local action End flavors next-csid lblen 32 nflen 16 dev l0
  done
  # Hosts: steering tables (mrc-perf --srv6-via route): mark -> table -> inline SRH.
  while read -r h mark table dst segs; do
    gw=$(q ".hosts[$h].gateway")
    route "h$h" "$dst/128" encap seg6 mode inline segs "$segs" via "$gw" dev "$(q ".hosts[$h].ifname")" table "$table"
    nsx "h$h" ip -6 rule list fwmark "$mark" | grep . >/dev/null || nsx "h$h" ip -6 rule add fwmark "$mark" lookup "$table"
  done < <(q '.steering[] | "\(.host) \(.mark) \(.table) \(.dst) \(.segments | join(","))"')
  # Prove the plain path between every pair of hosts before declaring success.
  local src
  while read -r src a; do
    reach "$src" "$a" || die "no route from $src to $a over the fabric"
  done < <(q '.hosts[] as $s | .hosts[] | select(.name != $s.name) | "\($s.name) \(.addr)"')
}

# reach SRC ADDR: a TCP connect from host SRC to a closed port of ADDR is answered by a
# RST ("refused") only if the packet got there and the answer came back. Bounded: 3 tries
# of 2 s.
reach() {
  local src=$1 t out
  for t in 1 2 3; do
    out=$(nsx "$src" timeout 2 bash -c "echo > /dev/tcp/$2/9" 2>&1 || true)
    case "$out" in *refused*) return 0 ;; esac
  done
  echo "mrc-testbed: $src -> $2: ${out:-timeout}" >&2
  return 1
}

complete() {
  local n
  for n in "${NODES[@]}"; do exists "$n" || return 1; done
  nsx "${HOSTS[0]}" ip -6 route show fd00::/8 | grep via >/dev/null || return 1
  for n in "${SPINES[@]}"; do
    nsx "$n" ip -6 route show "$(q ".spines[${n#s}].usid_prefix")/48" | grep seg6local >/dev/null || return 1
  done
  nsx "${HOSTS[0]}" ip -6 rule list | grep fwmark >/dev/null || return 1
}

# kernel_check: exit 3, naming what failed, when this kernel lacks what `build` uses (a
# kernel without CONFIG_IPV6_SEG6_LWTUNNEL answers "lwt encapsulation type not supported").
kernel_check() {
  local ns="${PFX}k$$" err rc=0
  ip netns add "$ns" || die "cannot create a network namespace"
  err=$({ ip -n "$ns" link set lo up &&
    ip -n "$ns" -6 route add fc00::1/128 encap seg6 mode encap segs fc00::2 dev lo &&
    ip -n "$ns" -6 route add fc00::3/128 encap seg6local action End dev lo &&
    ip -n "$ns" -6 route add fc00:75::/48 encap seg6local action End flavors next-csid lblen 32 nflen 16 dev lo; } 2>&1) || rc=$?
  ip netns del "$ns" 2>/dev/null || true
  if [ "$rc" != 0 ]; then
    echo "mrc-testbed: this kernel ($(uname -r)) cannot build the SRv6 fabric: ${err//$'\n'/ } (it needs CONFIG_IPV6_SEG6_LWTUNNEL, and NEXT-C-SID: Linux 6.1 or later)" >&2
    exit 3
  fi
}

up() {
  kernel_check
  PLAN=$(make_plan "$@") || die "no plan"
  load_names
  if [ -f "$SAVED" ] && [ "$(cat "$SAVED")" = "$PLAN" ] && complete; then
    echo "mrc-testbed: already up"; return 0
  fi
  down
  trap 'rc=$?; echo "mrc-testbed: build failed (exit $rc), cleaning up" >&2; down; exit $rc' ERR
  trap 'rc=$?; if [ $rc != 0 ]; then echo "mrc-testbed: build failed (exit $rc), cleaning up" >&2; down; fi' EXIT
  mkdir -p "$STATE"
  printf '%s\n' "$PLAN" >"$SAVED"
  build
  trap - ERR EXIT
  echo "mrc-testbed: up (${#HOSTS[@]} hosts, ${#LEAVES[@]} leaves, ${#SPINES[@]} spines: ${#NODES[@]} namespaces ${PFX}*)"
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
  while read -r j i; do
    d=/sys/class/net/l$i/statistics
    echo "s$j l$i rx_bytes $(nsx "s$j" cat $d/rx_bytes) tx_bytes $(nsx "s$j" cat $d/tx_bytes)"
  done < <(q '.links[] | "\(.spine) \(.leaf)"' | sort -n -k1,1 -k2,2)
}

setlink() {
  local s=$1 l=$2 state=$3
  [[ " ${SPINES[*]} " == *" $s "* && " ${LEAVES[*]} " == *" $l "* ]] || die "link SPINE LEAF up|down"
  nsx "$l" ip link set dev "$s" "$state"
}

# loss PCT|off [HOST]: nftables in HOST's leaf drops PCT% of what it forwards to HOST.
loss() {
  local pct=$1 h=${2:-${HOSTS[-1]}} leaf lif
  command -v nft >/dev/null || die "nft not installed (apt-get install -y nftables)"
  [[ " ${HOSTS[*]} " == *" $h "* ]] || die "loss: no host $h"
  leaf=l$(q ".hosts[${h#h}].leaf"); lif=$(q ".hosts[${h#h}].leaf_ifname")
  nsx "$leaf" nft delete table inet mrctb 2>/dev/null || true
  [ "$pct" = off ] && return 0
  [[ "$pct" =~ ^[0-9]+$ && "$pct" -le 100 ]] || die "loss PCT (0..100) or off"
  nsx "$leaf" nft -f - <<EOF
table inet mrctb {
  chain loss {
    type filter hook forward priority 0; policy accept;
    oifname "$lif" numgen random mod 100 < $pct counter drop
  }
}
EOF
}

need_root
cmd=${1:-}
shift || true
case "$cmd" in
  up) up "$@" ;;
  kernel) kernel_check; echo "mrc-testbed: this kernel ($(uname -r)) can build the SRv6 fabric" ;;
  down) down; echo "mrc-testbed: down" ;;
  status) [ -f "$SAVED" ] || { echo "mrc-testbed: not up"; exit 1; }; load_saved; status ;;
  plan) load_saved; printf '%s\n' "$PLAN" ;;
  counters) load_saved; counters ;;
  link) [ $# = 3 ] || die "link SPINE LEAF up|down"; load_saved; setlink "$@" ;;
  loss) [ $# -ge 1 ] && [ $# -le 2 ] || die "loss PCT|off [HOST]"; load_saved; loss "$@" ;;
  exec) [ $# -ge 2 ] || die "exec NODE CMD..."; n=$1; shift; nsx "$n" "$@" ;;
  *) die "usage: $0 up [DESIGN FLAGS]|down|status|plan|counters|link SPINE LEAF up|down|loss PCT|off [HOST]|exec NODE CMD...|kernel" ;;
esac
