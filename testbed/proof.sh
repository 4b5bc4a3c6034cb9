#!/usr/bin/env bash
# proof.sh: the measurements of issue 8 on the namespace fabric of mrc-testbed.sh, by
# interface counters (/sys/class/net/*/statistics in the spine namespaces).
#
#   testbed/proof.sh [spread|failure|loss|bootstrap|all]   (root; builds mrc-perf --release first)
#
# spread:  16 EVs, plain ECMP routing vs --srv6 srh vs --srv6 usid (header from the
#          socket, and from the host's steering route with --srv6-via route): bytes each
#          spine received from leaf0 (the data direction), mean and worst deviation;
#          RUNS (default 3) runs of each.
# failure: --srv6 srh --verify; the leaf0-spine1 link goes down once spine1 has carried
#          8 MB; the run must finish exact, EVs 1, 5, 9, 13 ASSUMED_BAD.
# loss:    nftables drops PCT% of the packets leaf1 sends to host1; mrc (plain, srh via
#          socket, srh via route) goodput beside iperf3 TCP over the same path, for each PCT.
# bootstrap: nftables in leaf1 drops the client's 48-byte QpInfo segment (IPv6 payload
#          80 bytes to the bootstrap port) for 1.5 s, so the server connects its QP late;
#          the client must not post before (before the ready barrier it failed with
#          RetryExceeded after its ~520 ms of RTOs).
# Everything runs under `timeout`; the fabric is torn down on exit, even on failure.
set -Eeuo pipefail
cd "$(dirname "$0")/.."
T=$PWD/testbed/mrc-testbed.sh
TD=$(cd "${CARGO_TARGET_DIR:-target}" 2>/dev/null && pwd || echo "$PWD/target")
B=$TD/release/mrc-perf
H1=fd00:6d72:63:11::2
N=${N:-2000}
LOSSES=${LOSSES:-"0 1 2 5"}
DUR=${DUR:-4}
case "${1:-all}" in
  spread|failure|loss|bootstrap|all) ;;
  *) echo "usage: testbed/proof.sh [spread|failure|loss|bootstrap|all]" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "proof.sh: must run as root" >&2; exit 1; }
RUNS=${RUNS:-3}
cargo build -q --release -p mrc-examples --bin mrc-perf --bin mrc-sim
export MRCTB_SIM=$TD/release/mrc-sim
trap '"$T" down >/dev/null' EXIT
"$T" down >/dev/null
"$T" up --srv6

spine_rx() { local j; for j in 0 1 2 3; do "$T" exec "s$j" cat /sys/class/net/l0/statistics/rx_bytes; done; }

# run_mrc ARGS...: one server on host1, one client on host0; client output in /tmp/mrctb-cli.out
run_mrc() {
  timeout 120 "$T" exec h1 "$B" server --bind "$H1" >/tmp/mrctb-srv.out 2>&1 &
  local sp=$! rc=0
  for _ in $(seq 50); do "$T" exec h1 ss -ltn | grep 18515 >/dev/null && break; sleep 0.1; done
  timeout 120 "$T" exec h0 "$B" client "$H1" "$@" >/tmp/mrctb-cli.out 2>&1 || rc=$?
  wait $sp || rc=$((rc + 100))
  return $rc
}

spread() {
  local mode a b j r args
  echo "== spread: 16 EVs, $N x 64 KiB, --verify; bytes each spine received from leaf0"
  for mode in plain srh usid srh-route usid-route; do
   for r in $(seq "$RUNS"); do
    case $mode in
      plain) args=() ;;
      *-route) args=(--srv6 "${mode%-route}" --srv6-via route) ;;
      *) args=(--srv6 "$mode") ;;
    esac
    mapfile -t a < <(spine_rx)
    run_mrc --verify -n "$N" "${args[@]}"
    mapfile -t b < <(spine_rx)
    local d=() 
    for j in 0 1 2 3; do d+=($((b[j] - a[j]))); done
    printf '%-10s s0 %11d  s1 %11d  s2 %11d  s3 %11d  ' "$mode" "${d[@]}"
    printf '%s\n' "${d[@]}" | awk '{s+=$1; v[NR]=$1} END {m=s/NR; w=0; for(i in v){x=(v[i]-m)/m*100; if(x<0)x=-x; if(x>w)w=x}; printf "mean %d  worst deviation %.2f%%\n", m, w}'
    grep -E '^ (verify|total):|^ 65536' /tmp/mrctb-cli.out
   done
  done
}

failure() {
  echo "== failure: --srv6 srh --verify -n 6000, leaf0-spine1 link down after 8 MB on spine1"
  local base
  base=$("$T" exec s1 cat /sys/class/net/l0/statistics/rx_bytes)
  (
    for _ in $(seq 400); do
      now=$("$T" exec s1 cat /sys/class/net/l0/statistics/rx_bytes)
      if [ $((now - base)) -gt 8000000 ]; then "$T" link s1 l0 down; echo "link s1-l0 down after $((now - base)) bytes"; exit 0; fi
      sleep 0.02
    done
    echo "spine1 never carried 8 MB"
  ) &
  local wp=$! rc=0
  run_mrc --verify -n 6000 --srv6 srh --timeout 10 || rc=$?
  wait $wp
  "$T" link s1 l0 up
  sed -n '/Per-EV/,$p' /tmp/mrctb-cli.out
  echo "client+server exit: $rc"
}

loss() {
  command -v nft >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables >/dev/null
  command -v iperf3 >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iperf3 >/dev/null
  echo "== loss on leaf1 -> host1 (nft numgen random mod 100 < PCT drop), ${DUR}s each, MB/s of goodput"
  printf '%5s %12s %12s %14s %12s %16s\n' loss% mrc-plain mrc-srh mrc-srh-route tcp-iperf3 tcp-retransmits
  local pct m1 m2 m3 tcp
  for pct in $LOSSES; do
    "$T" loss "$pct"
    run_mrc -D "$DUR" --timeout 10 || true
    m1=$(awk '/^ 65536/ {print $4}' /tmp/mrctb-cli.out)
    run_mrc -D "$DUR" --timeout 10 --srv6 srh || true
    m2=$(awk '/^ 65536/ {print $4}' /tmp/mrctb-cli.out)
    grep -q "RetryExceeded" /tmp/mrctb-cli.out /tmp/mrctb-srv.out && echo "srh at $pct%: RetryExceeded" >&2
    run_mrc -D "$DUR" --timeout 10 --srv6 srh --srv6-via route || true
    m3=$(awk '/^ 65536/ {print $4}' /tmp/mrctb-cli.out)
    timeout 30 "$T" exec h1 iperf3 -s -1 -B "$H1" -p 5299 >/dev/null 2>&1 &
    local ip=$!
    sleep 0.5
    timeout 30 "$T" exec h0 iperf3 -c "$H1" -p 5299 -t "$DUR" -J >/tmp/mrctb-iperf.json 2>&1 || true
    wait $ip || true
    tcp=$(python3 -c 'import json,sys; j=json.load(open("/tmp/mrctb-iperf.json")); e=j["end"]; print("%.2f %d" % (e["sum_received"]["bits_per_second"]/8e6, e["sum_sent"].get("retransmits",0)))' 2>/dev/null || echo "failed -")
    printf '%5s %12s %12s %14s %12s %16s\n' "$pct" "${m1:-failed}" "${m2:-failed}" "${m3:-failed}" $tcp
  done
  "$T" loss off
}

bootstrap() {
  echo "== bootstrap: the client's QpInfo to the server held back 1.5 s, --srv6 srh -n 200"
  "$T" exec l1 nft -f - <<EOF
table inet mrctbrace {
  chain f {
    type filter hook forward priority 0; policy accept;
    oifname "h1" tcp dport 18515 ip6 length 80 counter drop
  }
}
EOF
  run_mrc -n 200 --timeout 10 --srv6 srh &
  local p=$! rc=0
  sleep 1.5
  "$T" exec l1 nft list table inet mrctbrace | grep -o 'counter packets [0-9]*'
  "$T" exec l1 nft delete table inet mrctbrace
  wait $p || rc=$?
  grep -E '^ 65536|error' /tmp/mrctb-cli.out || true
  echo "client+server exit: $rc"
}

case "${1:-all}" in
  spread) spread ;;
  failure) failure ;;
  loss) loss ;;
  bootstrap) bootstrap ;;
  all) spread; failure; loss; bootstrap ;;
  *) echo "usage: $0 [spread|failure|loss|bootstrap|all]" >&2; exit 2 ;;
esac
