#!/usr/bin/env bash
# mrc-testbed.sh: a real-kernel leaf-spine fabric of network namespaces, in one plane or
# several, with SRv6 steering where the kernel has it (issues 8 and 43), built from the
# spine-leaf designer's output.
#
#   mrc-testbed.sh up [--srv6|--no-srv6] [DESIGN FLAGS]
#                            build it (idempotent: a complete fabric of the same plan and
#                            SRv6 choice is left as it is); DESIGN FLAGS go to `mrc-sim
#                            testbed-plan` (--planes, --gpus, --gpus-per-server, ...).
#                            SRv6 (SIDs, seg6local End, steering tables): by default where
#                            the kernel has it (`kernel`); where it does not, `up` says so
#                            in one line and builds the plain-routing fabric. --srv6 (or
#                            MRCTB_SRV6=on) requires it: exit 3, as `kernel`, without it;
#                            --no-srv6 (MRCTB_SRV6=off) never builds it
#   mrc-testbed.sh down      remove every namespace it made (idempotent)
#   mrc-testbed.sh status    namespaces, links, SIDs, `srv6: on` or `srv6: off (reason)`;
#                            exit 1 when the fabric is not complete
#   mrc-testbed.sh plan      the plan it was built from (JSON)
#   mrc-testbed.sh counters  bytes (rx, tx) of every spine interface, one line each; with
#                            planes also one line per plane of the spines' and one of the
#                            hosts' bytes and packets
#   mrc-testbed.sh link SPINE LEAF up|down   take a leaf-spine link down or up again
#   mrc-testbed.sh plane P up|down           every link of plane P: the hosts' plane-P
#                                            interfaces and the plane's leaf-spine links
#   mrc-testbed.sh loss PCT|off [HOST]       random loss on the leaf -> HOST link(s)
#                                            (nftables; default the last host; every plane)
#   mrc-testbed.sh plane-loss P PCT|off      random loss on every host's plane-P interface
#                                            (nftables, ingress; 100: a dead plane whose
#                                            links stay up)
#   mrc-testbed.sh exec NODE CMD...          run CMD in namespace mrctb-NODE
#   mrc-testbed.sh kernel    whether this kernel can build the SRv6 parts (SRv6 lightweight
#                            tunnels: encap seg6, seg6local End, NEXT-C-SID), tried in a
#                            scratch namespace; exit 3 with the reason when it cannot
#   (MRCTB_PREFIX=mrctbX- selects another set of namespaces, for concurrent runs;
#   MRCTB_HASH_SEED=N, 1..4294967295, gives every namespace that ECMP hash seed
#   (net.ipv4.fib_multipath_hash_seed, Linux 6.11+, IPv4 and IPv6 alike) instead of a
#   random one per namespace, so that each EV takes the same spines on every `up`:
#   benchmarks of two builds then compare on the same paths)
#
# The plan: `mrc-sim testbed-plan --json -` (examples/src/testbed.rs) turns the designer's
# output (default: 8 GPUs, 4 per server, 8-port leaves, 2-port spines -> 2 hosts, 2
# leaves, 4 spines) into namespaces, links, addresses, SIDs and steering tables; this
# script builds exactly that (jq reads it). mrc-sim is $MRCTB_SIM, else the newer of
# target/release and target/debug of this checkout; MRCTB_PLAN=FILE takes a plan file
# instead. `up` keeps the plan in /run/mrctb/PREFIXplan.json and its SRv6 choice in
# /run/mrctb/PREFIXsrv6 for the other commands.
# Addresses are unique-local only (fd00:6d72:63::/48, uSID block fd00:75::/32); routes
# are static. Plain routing: a leaf reaches every other leaf's hosts by an ECMP route over
# all spines hashed on the L4 5-tuple (fib_multipath_hash_policy=1). Steering: an SRH
# [spine SID, leaf SID, host] or a uSID container fd00:75:<spine>:<leaf>:: before the host
# pins a packet to one spine; End (and End with NEXT-C-SID for uSIDs) on every switch.
# In each host, the plan's steering tables (one per mode and spine, selected by a
# firewall mark) add that header in the kernel: `mrc-perf --srv6 MODE --srv6-via route`.
#
# Planes (`up --planes P`, 2..8): P disjoint copies of the leaves, spines and leaf-spine
# links, named p<p>-l<i> and p<p>-s<j>; host h has interface eth<p> on plane p's leaf,
# address fd00:6d72:63:<p>01<h>::2 (plane p is the first hex digit of every subnet of the
# plane; plane 0 has the one-plane addresses). A host's eth<p> routes only the other
# hosts' plane-p prefixes (and, with SRv6, plane p's SIDs): no route crosses planes. One
# plane (the default) is the fabric as before: host interface `l`, switches l<i>, s<j>,
# and a host route fd00::/8.
set -Eeuo pipefail

# Namespace prefix; MRCTB_PREFIX lets concurrent runs (tests, CI) use their own fabric. It
# must start with "mrctb" and be at most 10 characters, so nothing else is ever touched.
PFX=${MRCTB_PREFIX:-mrctb-}
[[ "$PFX" =~ ^mrctb[A-Za-z0-9_-]{0,5}$ ]] || { echo "mrc-testbed: MRCTB_PREFIX must match mrctb[A-Za-z0-9_-]{0,5}" >&2; exit 1; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE=/run/mrctb
SAVED=$STATE/${PFX}plan.json
SRV6_SAVED=$STATE/${PFX}srv6

die() { echo "mrc-testbed: $*" >&2; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || die "must run as root (network namespaces, veth, seg6local)"; }
nsx() { local n=$1; shift; ip netns exec "$PFX$n" "$@"; }
SEED=${MRCTB_HASH_SEED:-}
[ -z "$SEED" ] || { [[ "$SEED" =~ ^[1-9][0-9]{0,9}$ ]] && [ "$SEED" -le 4294967295 ]; } ||
  die "MRCTB_HASH_SEED must be an integer in 1..4294967295 (got '$SEED')"
exists() { [ -e "/run/netns/$PFX$1" ]; }
command -v jq >/dev/null || die "jq not installed (apt-get install -y jq)"

# make_plan [DESIGN FLAGS]: the plan JSON on stdout.
make_plan() {
  if [ -n "${MRCTB_PLAN:-}" ]; then cat "$MRCTB_PLAN"; return; fi
  local sim=${MRCTB_SIM:-}
  if [ -z "$sim" ]; then
    # The newer of the release and debug builds.
    # shellcheck disable=SC2012 # two fixed paths; ls -t orders them by age
    sim=$(ls -t "${CARGO_TARGET_DIR:-$ROOT/target}/release/mrc-sim" "${CARGO_TARGET_DIR:-$ROOT/target}/debug/mrc-sim" 2>/dev/null | head -1 || true)
  fi
  [ -n "$sim" ] || die "no mrc-sim (cargo build -p mrc-examples --bin mrc-sim, or MRCTB_SIM=PATH)"
  "$sim" testbed-plan --json - "$@"
}

# PLAN holds the plan's JSON, VIEW the same normalized for this script (one shape for one
# plane and for several: every host port, link and switch with its plane and namespace
# names); q FILTER runs jq -r on VIEW.
PLAN=""
VIEW=""
q() { jq -r "$1" <<<"$VIEW"; }
# shellcheck disable=SC2016 # jq's variables, not the shell's
VIEW_JQ='
  (.design.planes // 1) as $P | .design.leaves as $L | .design.spines as $S
  | .leaves as $lv | .spines as $sv
  | [.hosts[] as $h
      | ($h.ports // [{plane: 0, ifname: $h.ifname, addr: $h.addr, gateway: $h.gateway,
                       leaf_name: "l\($h.leaf)", leaf_ifname: $h.leaf_ifname}])[]
      | {host: $h.name, plane, ifname, addr, gw: .gateway, leaf: .leaf_name,
         lif: .leaf_ifname}] as $ports
  | {planes: $P, mtu: .mtu_bytes, hosts: [.hosts[].name],
     leaves: [.leaves[] | {name, plane: (.plane // 0), sid, usid_prefix}],
     spines: [.spines[] | {name, plane: (.plane // 0), sid, usid_prefix}],
     ports: $ports,
     links: [.links[] | (.plane // 0) as $p
       | {plane: $p, leaf: $lv[$p * $L + .leaf].name, spine: $sv[$p * $S + .spine].name,
          lif: .leaf_ifname, la: .leaf_addr, sif: .spine_ifname, sa: .spine_addr}],
     steering: [.steering[] | (.plane // 0) as $p | "h\(.host)" as $n
       | ($ports[] | select(.host == $n and .plane == $p)) as $o
       | {host: $n, plane: $p, mark, table, dst, segs: (.segments | join(",")),
          gw: $o.gw, ifname: $o.ifname}]}'
set_plan() { PLAN=$1; VIEW=$(jq -c "$VIEW_JQ" <<<"$PLAN") || die "unreadable plan"; load_names; }
load_saved() { [ -f "$SAVED" ] || die "no fabric with prefix $PFX (run up first)"; set_plan "$(cat "$SAVED")"; SRV6=$(cat "$SRV6_SAVED" 2>/dev/null || echo on); }
load_names() {
  mapfile -t HOSTS < <(q '.hosts[]')
  mapfile -t LEAVES < <(q '.leaves[].name')
  mapfile -t SPINES < <(q '.spines[].name')
  NODES=("${HOSTS[@]}" "${LEAVES[@]}" "${SPINES[@]}")
  NPLANES=$(q .planes)
}
srv6_on() { [ "$SRV6" = on ]; }

# down: every namespace of this prefix named like a plan node (h<n>, l<n>, s<n>, and with
# planes p<p>-l<n>, p<p>-s<n> with p 0..7), with or without a saved plan, then the saved plan.
down() {
  local f
  for f in /run/netns/"$PFX"*; do
    [ -e "$f" ] || continue
    f=${f##*/}
    if [[ "${f#"$PFX"}" =~ ^([hls][0-9]+|p[0-7]-[ls][0-9]+)$ ]]; then ip netns del "$f"; fi
  done
  rm -f "$SAVED" "$SRV6_SAVED"
}

sysctls() {
  local n=$1
  nsx "$n" sysctl -qw net.ipv6.conf.all.forwarding=1 net.ipv6.conf.all.seg6_enabled=1 \
    net.ipv6.conf.default.seg6_enabled=1 net.ipv6.conf.all.accept_dad=0 \
    net.ipv6.conf.default.accept_dad=0 net.ipv6.fib_multipath_hash_policy=1 \
    net.ipv6.conf.all.keep_addr_on_down=1 net.ipv6.conf.default.keep_addr_on_down=1
  if [ -n "$SEED" ]; then
    nsx "$n" sysctl -qw net.ipv4.fib_multipath_hash_seed="$SEED" 2>/dev/null ||
      die "MRCTB_HASH_SEED: this kernel has no net.ipv4.fib_multipath_hash_seed (Linux 6.11+)"
  fi
  ip -n "$PFX$n" link set lo up
}

# link A IFA B IFB: a veth pair between namespaces, both ends up, seg6_enabled on both.
link() {
  ip link add name "$2" netns "$PFX$1" type veth peer name "$4" netns "$PFX$3"
  local n d
  for n in "$1 $2" "$3 $4"; do
    d=${n#* }; n=${n%% *}
    nsx "$n" sysctl -qw "net.ipv6.conf.$d.seg6_enabled=1" "net.ipv6.conf.$d.accept_dad=0"
    ip -n "$PFX$n" link set dev "$d" mtu "$MTU" up
  done
}

# scan: MAC[node/dev] and ISUP[node/dev] (1 when administratively up) of every interface
# of every node.
declare -A MAC ISUP
scan() {
  local n dev flags mac
  MAC=(); ISUP=()
  for n in "${NODES[@]}"; do
    while read -r dev flags mac; do
      MAC[$n/$dev]=$mac
      case ",$flags," in *,UP,*) ISUP[$n/$dev]=1 ;; *) ISUP[$n/$dev]=0 ;; esac
    done < <(ip -n "$PFX$n" -o link show | awk '{d = $2; sub(/:$/, "", d); sub(/@.*/, "", d); f = $3; gsub(/[<>]/, "", f); m = "-"; for (i = 4; i < NF; i++) if ($i == "link/ether") m = $(i + 1); print d, f, m}')
  done
}
# The interfaces administratively down, as a jq object {"node/dev": true}.
down_json() {
  local k
  for k in "${!ISUP[@]}"; do [ "${ISUP[$k]}" = 1 ] || printf '%s\n' "$k"; done | jq -R . | jq -sc 'map({(.): true}) | add // {}'
}

# apply: lines "NODE ip-command" on stdin, run with one `ip -6 -batch` per node, in order.
apply() {
  local lines n cmds
  lines=$(cat)
  for n in "${NODES[@]}"; do
    cmds=$(awk -v n="$n" '$1 == n { $1 = ""; print substr($0, 2) }' <<<"$lines")
    [ -n "$cmds" ] || continue
    ip -6 -n "$PFX$n" -batch - <<<"$cmds" || die "$n: ip -batch failed: $(tr '\n' ';' <<<"$cmds")"
  done
}

# plane_cmds P VERB: the ip commands ("NODE ...") that configure plane P on its veths:
# addresses, routes (VERB add or replace) and, with SRv6, the SIDs and steering routes.
# Routes and nexthops through an interface that is administratively down are left out (it
# lost them; `plane P up` and `link ... up` run this again with replace).
# shellcheck disable=SC2016 # jq's variables, not the shell's
PLANE_JQ='
  def up($n; $d): ($down["\($n)/\($d)"] | not);
  . as $v
  | [$v.ports[] | select(.plane == $p)] as $ports
  | [$v.links[] | select(.plane == $p)] as $links
  | [$v.leaves[] | select(.plane == $p)] as $leaves
  | [$v.spines[] | select(.plane == $p)] as $spines
  | ($leaves + $spines) as $switches
  | def ecmp($l): [$links[] | select(.leaf == $l and up($l; .lif))
                   | "nexthop via \(.sa) dev \(.lif)"] | join(" ");
  # Addresses: hosts and their leaves, both ends of every leaf-spine link.
    ( ($ports[] | "\(.host) addr replace \(.addr)/64 dev \(.ifname) nodad",
                  "\(.leaf) addr replace \(.gw)/64 dev \(.lif) nodad"),
      ($links[] | "\(.leaf) addr replace \(.la)/64 dev \(.lif) nodad",
                  "\(.spine) addr replace \(.sa)/64 dev \(.sif) nodad") ),
  # Hosts: one plane: everything unique-local into the fabric; planes: the other hosts
  # of this plane (and its SIDs) through this plane interface only.
    ( $ports[] as $s | select(up($s.host; $s.ifname))
      | if $v.planes == 1 then "\($s.host) route \($verb) fd00::/8 via \($s.gw) dev \($s.ifname)"
        else ( $ports[] | select(.host != $s.host)
               | "\($s.host) route \($verb) \(.addr)/64 via \($s.gw) dev \($s.ifname)" ),
             ( if $srv6 then $switches[]
                 | "\($s.host) route \($verb) \(.sid)/64 via \($s.gw) dev \($s.ifname)",
                   "\($s.host) route \($verb) \(.usid_prefix)/48 via \($s.gw) dev \($s.ifname)"
               else empty end )
        end ),
  # Leaves: other leaves hosts (and SIDs) by ECMP over the spines; each spine SIDs over
  # its link; their own SIDs as End towards (any of) their hosts.
    ( $leaves[] as $l | ecmp($l.name) as $e
      | ( if $e == "" then empty else
            ( $ports[] | select(.leaf != $l.name) | "\($l.name) route \($verb) \(.addr)/64 \($e)" ),
            ( if $srv6 then $leaves[] | select(.name != $l.name)
                | "\($l.name) route \($verb) \(.sid)/64 \($e)",
                  "\($l.name) route \($verb) \(.usid_prefix)/48 \($e)"
              else empty end )
          end ),
        ( if $srv6 then
            ( $links[] | select(.leaf == $l.name and up($l.name; .lif)) as $k
              | $spines[] | select(.name == $k.spine)
              | "\($l.name) route \($verb) \(.sid)/64 via \($k.sa) dev \($k.lif)",
                "\($l.name) route \($verb) \(.usid_prefix)/48 via \($k.sa) dev \($k.lif)" ),
            ( [$ports[] | select(.leaf == $l.name)][0].lif as $d
              | "\($l.name) route \($verb) \($l.sid)/64 encap seg6local action End dev \($d)",
                "\($l.name) route \($verb) \($l.usid_prefix)/48 encap seg6local action End flavors next-csid lblen 32 nflen 16 dev \($d)" )
          else empty end ) ),
  # Spines: every host (and leaf SID) over the link to its leaf; their own SIDs as End.
    ( $spines[] as $sp
      | ( $ports[] as $h | $links[] | select(.spine == $sp.name and .leaf == $h.leaf)
          | "\($sp.name) route \($verb) \($h.addr)/64 via \(.la) dev \(.sif)" ),
        ( if $srv6 then
            ( $leaves[] as $l | $links[] | select(.spine == $sp.name and .leaf == $l.name)
              | "\($sp.name) route \($verb) \($l.sid)/64 via \(.la) dev \(.sif)",
                "\($sp.name) route \($verb) \($l.usid_prefix)/48 via \(.la) dev \(.sif)" ),
            ( [$links[] | select(.spine == $sp.name)][0].sif as $d
              | "\($sp.name) route \($verb) \($sp.sid)/64 encap seg6local action End dev \($d)",
                "\($sp.name) route \($verb) \($sp.usid_prefix)/48 encap seg6local action End flavors next-csid lblen 32 nflen 16 dev \($d)" )
          else empty end ) ),
  # Hosts: steering tables (mrc-perf --srv6-via route): mark -> table -> inline SRH.
    ( if $srv6 then $v.steering[] | select(.plane == $p and up(.host; .ifname))
        | "\(.host) route \($verb) \(.dst)/128 encap seg6 mode inline segs \(.segs) via \(.gw) dev \(.ifname) table \(.table)"
      else empty end )'
plane_cmds() {
  local s=false
  srv6_on && s=true
  jq -r --argjson p "$1" --arg verb "$2" --argjson srv6 "$s" --argjson down "$(down_json)" "$PLANE_JQ" <<<"$VIEW"
}

# pin_cmds P: for every link of plane P whose both ends are up, in each end a permanent
# neighbour entry for the other end's address with its MAC, so no packet of a run waits
# on (or is dropped during) neighbour discovery.
pin_cmds() {
  local a ad aa b bd ba
  while read -r a ad aa b bd ba; do
    { [ "${ISUP[$a/$ad]:-0}" = 1 ] && [ "${ISUP[$b/$bd]:-0}" = 1 ]; } || continue
    echo "$a neigh replace $ba lladdr ${MAC[$b/$bd]} dev $ad nud permanent"
    echo "$b neigh replace $aa lladdr ${MAC[$a/$ad]} dev $bd nud permanent"
  done < <(q ".ports[] | select(.plane == $1) | \"\(.host) \(.ifname) \(.addr) \(.leaf) \(.lif) \(.gw)\"";
           q ".links[] | select(.plane == $1) | \"\(.leaf) \(.lif) \(.la) \(.spine) \(.sif) \(.sa)\"")
}

# config_plane P VERB: addresses, neighbours and routes of plane P.
config_plane() {
  scan
  { plane_cmds "$1" "$2"; pin_cmds "$1"; } | apply
}

build() {
  local h ifn leaf lif spine sif mark table p src a
  MTU=$(q .mtu)
  for h in "${NODES[@]}"; do ip netns add "$PFX$h"; sysctls "$h"; done
  while read -r h ifn leaf lif; do
    link "$h" "$ifn" "$leaf" "$lif"
  done < <(q '.ports[] | "\(.host) \(.ifname) \(.leaf) \(.lif)"')
  while read -r leaf lif spine sif; do
    link "$leaf" "$lif" "$spine" "$sif"
  done < <(q '.links[] | "\(.leaf) \(.lif) \(.spine) \(.sif)"')
  for ((p = 0; p < NPLANES; p++)); do config_plane "$p" add; done
  if srv6_on; then
    while read -r h mark table; do
      ip -n "$PFX$h" -6 rule add fwmark "$mark" lookup "$table"
    done < <(q '[.steering[] | "\(.host) \(.mark) \(.table)"] | unique[]')
  fi
  # Prove the plain path between every pair of hosts, in every plane, before declaring
  # success.
  # shellcheck disable=SC2016 # jq's variables
  while read -r src a; do
    reach "$src" "$a" || die "no route from $src to $a over the fabric"
  done < <(q '.ports[] as $s | .ports[] | select(.host != $s.host and .plane == $s.plane) | "\($s.host) \(.addr)"')
}

# reach SRC ADDR: a TCP connect from host SRC to a closed port of ADDR is answered by a
# RST ("refused") only if the packet got there and the answer came back. Bounded: 3 tries
# of 2 s.
reach() {
  local src=$1 out
  for _ in 1 2 3; do
    out=$(nsx "$src" timeout 2 bash -c "echo > /dev/tcp/$2/9" 2>&1 || true)
    case "$out" in *refused*) return 0 ;; esac
  done
  echo "mrc-testbed: $src -> $2: ${out:-timeout}" >&2
  return 1
}

complete() {
  local n h ifn a
  for n in "${NODES[@]}"; do exists "$n" || return 1; done
  while read -r h ifn; do
    # An interface taken down on purpose (plane P down) has lost its routes.
    ip -n "$PFX$h" -o link show dev "$ifn" | grep '[<,]UP[,>]' >/dev/null || continue
    if [ "$NPLANES" = 1 ]; then
      ip -n "$PFX$h" -6 route show fd00::/8 | grep via >/dev/null || return 1
    else
      ip -n "$PFX$h" -6 route show dev "$ifn" | grep via >/dev/null || return 1
    fi
  done < <(q '.ports[] | "\(.host) \(.ifname)"')
  srv6_on || return 0
  while read -r n a; do
    ip -n "$PFX$n" -6 route show "$a/48" | grep seg6local >/dev/null || return 1
  done < <(q '.spines[] | "\(.name) \(.usid_prefix)"')
  ip -n "$PFX${HOSTS[0]}" -6 rule list | grep fwmark >/dev/null || return 1
}

# srv6_probe: whether this kernel has what the SRv6 parts use, tried in a scratch
# namespace; when it does not, why not on stdout (a kernel without
# CONFIG_IPV6_SEG6_LWTUNNEL answers "lwt encapsulation type not supported").
srv6_probe() {
  local ns="${PFX}k$$" err rc=0
  ip netns add "$ns" || die "cannot create a network namespace"
  err=$({ ip -n "$ns" link set lo up &&
    ip -n "$ns" -6 route add fc00::1/128 encap seg6 mode encap segs fc00::2 dev lo &&
    ip -n "$ns" -6 route add fc00::3/128 encap seg6local action End dev lo &&
    ip -n "$ns" -6 route add fc00:75::/48 encap seg6local action End flavors next-csid lblen 32 nflen 16 dev lo; } 2>&1) || rc=$?
  ip netns del "$ns" 2>/dev/null || true
  echo "${err//$'\n'/ }"
  return "$rc"
}

# kernel_check: exit 3, naming what failed, when this kernel lacks the SRv6 parts.
kernel_check() {
  local why
  if ! why=$(srv6_probe); then
    echo "mrc-testbed: this kernel ($(uname -r)) cannot build the SRv6 fabric: $why (it needs CONFIG_IPV6_SEG6_LWTUNNEL, and NEXT-C-SID: Linux 6.1 or later)" >&2
    exit 3
  fi
}

up() {
  local want=${MRCTB_SRV6:-auto} args=() a why
  for a in "$@"; do
    case "$a" in
      --srv6) want=on ;;
      --no-srv6) want=off ;;
      *) args+=("$a") ;;
    esac
  done
  case "$want" in
    on) kernel_check; SRV6=on ;;
    off) SRV6="off (not asked for: --no-srv6 or MRCTB_SRV6=off)" ;;
    auto)
      if why=$(srv6_probe); then
        SRV6=on
      else
        SRV6="off (this kernel, $(uname -r), lacks SRv6 lightweight tunnels: $why)"
        echo "mrc-testbed: srv6: $SRV6; building the plain-routing fabric without SIDs, seg6local and steering tables (up --srv6 requires them)"
      fi ;;
    *) die "MRCTB_SRV6 must be auto, on or off (got '$want')" ;;
  esac
  local plan
  plan=$(make_plan ${args[@]+"${args[@]}"}) || die "no plan"
  set_plan "$plan"
  if [ -f "$SAVED" ] && [ "$(cat "$SAVED")" = "$PLAN" ] &&
    [ "$(cut -d' ' -f1 "$SRV6_SAVED" 2>/dev/null)" = "${SRV6%% *}" ] && complete; then
    echo "mrc-testbed: already up"; return 0
  fi
  down
  trap 'rc=$?; echo "mrc-testbed: build failed (exit $rc), cleaning up" >&2; down; exit $rc' ERR
  trap 'rc=$?; if [ $rc != 0 ]; then echo "mrc-testbed: build failed (exit $rc), cleaning up" >&2; down; fi' EXIT
  mkdir -p "$STATE"
  printf '%s\n' "$PLAN" >"$SAVED"
  printf '%s\n' "$SRV6" >"$SRV6_SAVED"
  build
  trap - ERR EXIT
  local planes=""
  [ "$NPLANES" = 1 ] || planes="$NPLANES planes, "
  echo "mrc-testbed: up (${planes}${#HOSTS[@]} hosts, ${#LEAVES[@]} leaves, ${#SPINES[@]} spines: ${#NODES[@]} namespaces ${PFX}*)"
}

status() {
  local n rc=0
  for n in "${NODES[@]}"; do
    if exists "$n"; then
      printf '%-10s %s\n' "$PFX$n" "$(ip -n "$PFX$n" -br link show | grep -v '^lo' | awk '{printf "%s:%s ", $1, $2}')"
    else
      printf '%-10s missing\n' "$PFX$n"; rc=1
    fi
  done
  if [ $rc = 0 ]; then
    for n in "${LEAVES[@]}" "${SPINES[@]}"; do
      ip -n "$PFX$n" -6 route show | { grep seg6local || true; } | sed "s/^/$n: /"
    done
    complete || rc=1
  fi
  [ "$NPLANES" = 1 ] || echo "planes: $NPLANES"
  echo "srv6: $SRV6"
  if [ $rc = 0 ]; then echo "mrc-testbed: complete"; else echo "mrc-testbed: not complete"; fi
  return $rc
}

# stats NODE DEV: "rx_bytes tx_bytes rx_packets tx_packets" of DEV in NODE.
stats() {
  local d=/sys/class/net/$2/statistics
  nsx "$1" cat "$d/rx_bytes" "$d/tx_bytes" "$d/rx_packets" "$d/tx_packets" | paste -sd' '
}

# Per plane, the spines' summed counters (counters).
declare -A SP_RB SP_TB SP_RP SP_TP
counters() {
  local p s sif rb tb rp tp
  while read -r p s sif; do
    read -r rb tb rp tp < <(stats "$s" "$sif")
    echo "$s $sif rx_bytes $rb tx_bytes $tb"
    SP_RB[$p]=$(( ${SP_RB[$p]:-0} + rb )); SP_TB[$p]=$(( ${SP_TB[$p]:-0} + tb ))
    SP_RP[$p]=$(( ${SP_RP[$p]:-0} + rp )); SP_TP[$p]=$(( ${SP_TP[$p]:-0} + tp ))
  done < <(q '.links[] | "\(.plane) \(.spine) \(.sif) \(.leaf)"' | sort -t' ' -k1,1n -k2,2V -k4,4V | cut -d' ' -f1-3)
  [ "$NPLANES" = 1 ] && return 0
  local h ifn
  for ((p = 0; p < NPLANES; p++)); do
    echo "plane $p spines rx_bytes ${SP_RB[$p]} tx_bytes ${SP_TB[$p]} rx_packets ${SP_RP[$p]} tx_packets ${SP_TP[$p]}"
    local hrb=0 htb=0 hrp=0 htp=0
    while read -r h ifn; do
      read -r rb tb rp tp < <(stats "$h" "$ifn")
      hrb=$((hrb + rb)); htb=$((htb + tb)); hrp=$((hrp + rp)); htp=$((htp + tp))
    done < <(q ".ports[] | select(.plane == $p) | \"\(.host) \(.ifname)\"")
    echo "plane $p hosts rx_bytes $hrb tx_bytes $htb rx_packets $hrp tx_packets $htp"
  done
}
# wait_carrier NODE DEV...: until each DEV of NODE (pairs) has its carrier (LOWER_UP),
# at most 5 s.
wait_carrier() {
  local n d t
  while [ $# -ge 2 ]; do
    n=$1 d=$2; shift 2
    for ((t = 0; t < 100; t++)); do
      ip -n "$PFX$n" -o link show dev "$d" | grep LOWER_UP >/dev/null && break
      sleep 0.05
    done
  done
}

# set_links STATE PLANE "NODE DEV"...: DEVs up or down; on up, wait for both ends'
# carrier and configure PLANE again (its addresses, neighbours and routes were removed
# with the interface).
set_links() {
  local state=$1 p=$2 x ends=()
  shift 2
  for x in "$@"; do ip -n "$PFX${x% *}" link set dev "${x#* }" "$state"; done
  [ "$state" = up ] || return 0
  local a ad b bd
  while read -r a ad b bd; do ends+=("$a" "$ad" "$b" "$bd"); done < <(
    q ".ports[] | select(.plane == $p) | \"\(.host) \(.ifname) \(.leaf) \(.lif)\"";
    q ".links[] | select(.plane == $p) | \"\(.leaf) \(.lif) \(.spine) \(.sif)\"")
  wait_carrier "${ends[@]}"
  config_plane "$p" replace
}

setlink() {
  local s=$1 l=$2 state=$3 x
  [[ " ${SPINES[*]} " == *" $s "* && " ${LEAVES[*]} " == *" $l "* && "$state" =~ ^(up|down)$ ]] || die "link SPINE LEAF up|down"
  x=$(q ".links[] | select(.spine == \"$s\" and .leaf == \"$l\") | \"\(.plane) \(.leaf) \(.lif)\"")
  [ -n "$x" ] || die "link: $s and $l are not linked (not of the same plane)"
  set_links "$state" "${x%% *}" "${x#* }"
}

plane_updown() {
  local p=$1 state=$2 devs=()
  [[ "$p" =~ ^[0-9]+$ && "$p" -lt "$NPLANES" && "$state" =~ ^(up|down)$ ]] || die "plane P up|down (P 0..$((NPLANES - 1)))"
  mapfile -t devs < <(q ".ports[] | select(.plane == $p) | \"\(.host) \(.ifname)\""; q ".links[] | select(.plane == $p) | \"\(.leaf) \(.lif)\"")
  set_links "$state" "$p" "${devs[@]}"
  echo "mrc-testbed: plane $p $state (${#devs[@]} links)"
}

# drop_rule PCT: the nftables statement that drops PCT% of the packets it sees (numgen's
# range is 0..99, so 100 is a plain drop).
drop_rule() {
  if [ "$1" = 100 ]; then echo "counter drop"; else echo "numgen random mod 100 < $1 counter drop"; fi
}

# loss PCT|off [HOST]: nftables in HOST's leaf (of every plane) drops PCT% of what it
# forwards to HOST.
loss() {
  local pct=$1 h=${2:-${HOSTS[-1]}} leaf lif
  command -v nft >/dev/null || die "nft not installed (apt-get install -y nftables)"
  [[ " ${HOSTS[*]} " == *" $h "* ]] || die "loss: no host $h"
  [[ "$pct" = off || ( "$pct" =~ ^[0-9]+$ && "$pct" -le 100 ) ]] || die "loss PCT (0..100) or off"
  while read -r leaf lif; do
    nsx "$leaf" nft delete table inet mrctb 2>/dev/null || true
    [ "$pct" = off ] && continue
    nsx "$leaf" nft -f - <<EOF
table inet mrctb {
  chain loss {
    type filter hook forward priority 0; policy accept;
    oifname "$lif" $(drop_rule "$pct")
  }
}
EOF
  done < <(q ".ports[] | select(.host == \"$h\") | \"\(.leaf) \(.lif)\"")
}

# plane_loss P PCT|off: nftables (netdev family, ingress) on every host's plane-P
# interface drops PCT% of the packets arriving from plane P; every packet that crosses
# the plane arrives at one host interface, so PCT% of the plane's traffic is lost, after
# it crossed the switches, and senders see no error. Table netdev mrctb_plane<P>.
plane_loss() {
  local p=$1 pct=$2 h ifn
  command -v nft >/dev/null || die "nft not installed (apt-get install -y nftables)"
  [[ "$p" =~ ^[0-9]+$ && "$p" -lt "$NPLANES" ]] || die "plane-loss P PCT|off (P 0..$((NPLANES - 1)))"
  [[ "$pct" = off || ( "$pct" =~ ^[0-9]+$ && "$pct" -le 100 ) ]] || die "plane-loss P PCT|off (PCT 0..100)"
  while read -r h ifn; do
    nsx "$h" nft delete table netdev "mrctb_plane$p" 2>/dev/null || true
    [ "$pct" = off ] && continue
    nsx "$h" nft -f - <<EOF
table netdev mrctb_plane$p {
  chain loss {
    type filter hook ingress device "$ifn" priority 0; policy accept;
    $(drop_rule "$pct")
  }
}
EOF
  done < <(q ".ports[] | select(.plane == $p) | \"\(.host) \(.ifname)\"")
  echo "mrc-testbed: plane $p loss $pct"
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
  plane) [ $# = 2 ] || die "plane P up|down"; load_saved; plane_updown "$@" ;;
  loss) { [ $# -ge 1 ] && [ $# -le 2 ]; } || die "loss PCT|off [HOST]"; load_saved; loss "$@" ;;
  plane-loss) [ $# = 2 ] || die "plane-loss P PCT|off"; load_saved; plane_loss "$@" ;;
  exec) [ $# -ge 2 ] || die "exec NODE CMD..."; n=$1; shift; nsx "$n" "$@" ;;
  *) die "usage: $0 up [--srv6|--no-srv6] [DESIGN FLAGS]|down|status|plan|counters|link SPINE LEAF up|down|plane P up|down|loss PCT|off [HOST]|plane-loss P PCT|off|exec NODE CMD...|kernel" ;;
esac
