#!/usr/bin/env bash
# Side-by-side loopback measurements for issue 6: mrc goodput against the raw UDP ceiling
# (same sockets, batching and datagram size, no reliability) and kernel TCP (iperf3 when
# installed), and 8-byte latency against a UDP ping-pong on the same datapath.
# Each figure is the median of RUNS runs (default 3), runs interleaved so that a change in
# machine load hits all of them alike.
#
# Usage: scripts/baselines.sh [RUNS] [DURATION_S]   (RUNS >= 1, DURATION_S > 0 seconds)
# MRC_PERF=PATH runs that mrc-perf binary instead of building target/release/mrc-perf.
# Any failure prints a message (with mrc-perf's stderr) and exits 1.
set -euo pipefail
usage="usage: scripts/baselines.sh [RUNS] [DURATION_S] (RUNS a positive integer, DURATION_S positive seconds; defaults 3 3)"
RUNS=${1:-3}
DUR=${2:-3}
if ! [[ $RUNS =~ ^[1-9][0-9]*$ ]]; then
  echo "baselines.sh: RUNS must be a positive integer, got '$RUNS'" >&2
  echo "$usage" >&2
  exit 1
fi
if ! [[ $DUR =~ ^[0-9]*\.?[0-9]+$ && $DUR =~ [1-9] ]]; then
  echo "baselines.sh: DURATION_S must be a positive number of seconds, got '$DUR'" >&2
  echo "$usage" >&2
  exit 1
fi
command -v jq >/dev/null 2>&1 || { echo "baselines.sh: needs jq (apt-get install jq)" >&2; exit 1; }
cd "$(dirname "$0")/.."
if [ -n "${MRC_PERF:-}" ]; then
  P=$MRC_PERF
else
  cargo build --release -q -p mrc-examples --bin mrc-perf \
    || { echo "baselines.sh: cargo build of mrc-perf failed" >&2; exit 1; }
  P=target/release/mrc-perf
fi
# Per-run figures go to a private directory, removed on exit.
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# mrc-perf ARGS...: its JSON on stdout; on failure its stderr and exit 1 (the caller's
# `x=$(perf ...)` then stops the script under set -e).
perf() {
  local rc=0
  "$P" "$@" 2>"$T/stderr" || rc=$?
  if [ "$rc" != 0 ]; then
    echo "baselines.sh: mrc-perf $* failed (exit code $rc):" >&2
    cat "$T/stderr" >&2
    exit 1
  fi
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
: >"$T/mrc_bw"; : >"$T/mrc_cpu"; : >"$T/udp_bw"; : >"$T/udp_cpu"; : >"$T/tcp_bw"; : >"$T/tcp_cpu"
: >"$T/mrc_lat50"; : >"$T/mrc_lat99"; : >"$T/udp_lat50"; : >"$T/udp_lat99"
# One progress line on stderr per measurement (a run of RUNS x 4 measurements is otherwise
# silent for about RUNS x (2 x DURATION_S + 10) seconds).
progress() { echo "baselines.sh: run $i/$RUNS: $*" >&2; }
for i in $(seq "$RUNS"); do
  # 4096-byte payload, 16 EVs, 1 MiB messages, every byte checked.
  j=$(perf loopback -s 1048576 --paths 16 --mtu 4096 -D "$DUR" --verify --json)
  bad=$(jq -r '.receiver.bad_bytes' <<<"$j")
  [ "$bad" = 0 ] || { echo "verify failed: $bad bad bytes" >&2; exit 1; }
  jq -r '.bw_avg_gbps' <<<"$j" >>"$T/mrc_bw"
  jq -r '.cpu_s_per_gb' <<<"$j" >>"$T/mrc_cpu"
  progress "mrc --verify $(jq -r '.bw_avg_gbps' <<<"$j") Gb/s (--cc $(jq -r '.cc' <<<"$j"))"
  b=$(perf baseline -s 1048576 --paths 16 --mtu 4096 -D "$DUR" --json)
  jq -r '.baselines[0].gbps' <<<"$b" >>"$T/udp_bw"
  jq -r '.baselines[0].cpu_s_per_gb' <<<"$b" >>"$T/udp_cpu"
  jq -r '.baselines[1].gbps' <<<"$b" >>"$T/tcp_bw"
  jq -r '.baselines[1].cpu_s_per_gb' <<<"$b" >>"$T/tcp_cpu"
  tcp_name=$(jq -r '.baselines[1].name' <<<"$b")
  progress "raw UDP $(jq -r '.baselines[0].gbps' <<<"$b") Gb/s, $tcp_name $(jq -r '.baselines[1].gbps' <<<"$b") Gb/s"
  l=$(perf loopback --test lat -s 8 -n 20000 --verify --json)
  jq -r '.lat_us.typical' <<<"$l" >>"$T/mrc_lat50"
  jq -r '.lat_us.p99' <<<"$l" >>"$T/mrc_lat99"
  progress "mrc latency median $(jq -r '.lat_us.typical' <<<"$l") us"
  u=$(perf baseline --test lat -s 8 -n 20000 --json)
  jq -r '.baselines[0].lat_us.typical' <<<"$u" >>"$T/udp_lat50"
  jq -r '.baselines[0].lat_us.p99' <<<"$u" >>"$T/udp_lat99"
  progress "UDP ping-pong median $(jq -r '.baselines[0].lat_us.typical' <<<"$u") us"
done
m() { median <"$1"; }
mrc=$(m "$T/mrc_bw"); udp=$(m "$T/udp_bw")
echo "runs: $RUNS x ${DUR}s, loopback 127.0.0.1, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-44s %10s %12s\n' "bw (1 MiB msgs, 4096 B payload, 16 EVs)" "Gb/s" "CPU s/GB"
printf '%-44s %10.2f %12.3f\n' "mrc --verify" "$mrc" "$(m "$T/mrc_cpu")"
printf '%-44s %10.2f %12.3f\n' "raw UDP blast (same datapath)" "$udp" "$(m "$T/udp_cpu")"
printf '%-44s %10.2f %12.3f\n' "$tcp_name" "$(m "$T/tcp_bw")" "$(m "$T/tcp_cpu")"
awk -v a="$mrc" -v b="$udp" 'BEGIN {printf "mrc / raw UDP ceiling: %.0f%%\n", 100*a/b}'
printf '%-44s %10s %12s\n' "lat (8 B, one way = RTT/2)" "median us" "p99 us"
printf '%-44s %10.2f %12.2f\n' "mrc --verify" "$(m "$T/mrc_lat50")" "$(m "$T/mrc_lat99")"
printf '%-44s %10.2f %12.2f\n' "UDP ping-pong (same datapath)" "$(m "$T/udp_lat50")" "$(m "$T/udp_lat99")"
echo "per run (mrc bw): $(tr '\n' ' ' <"$T/mrc_bw")  (raw UDP): $(tr '\n' ' ' <"$T/udp_bw")"
