#!/usr/bin/env bash
# Side-by-side one-way latency on loopback (issue 18 item 2): `sockperf ping-pong -m 16`
# against `mrc-perf loopback --test lat` (8-byte WRITE_WITH_IMM ping-pong, caller
# progress) on the direct datapath (--udp-io direct, the default) and on io_uring
# (--udp-io uring), and `mrc-perf baseline --test lat` (a raw UDP ping-pong on the same
# sockets and system calls as mrc's direct datapath, both ends busy-polling: the floor of
# that path). RUNS rounds, each running the four back to back (interleaved, so a
# change of machine load hits all alike); prints each run, then the median over the runs
# of each one's median and 99th percentile, and the ratios mrc / sockperf.
#
# Usage: scripts/lat_vs_sockperf.sh [RUNS] [DURATION_S]   (defaults 3 3)
# MRC_PERF=PATH runs that mrc-perf binary instead of building target/release/mrc-perf;
# SOCKPERF_PORT (default 19311) is the sockperf server's UDP port on 127.0.0.1.
# Needs sockperf and jq. Any failure prints a message and exits 1.
set -euo pipefail
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
RUNS=${1:-3}
DUR=${2:-3}
PORT=${SOCKPERF_PORT:-19311}
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "lat_vs_sockperf.sh: RUNS must be a positive integer, got '$RUNS'" >&2; exit 1; }
[[ $DUR =~ ^[1-9][0-9]*$ ]] || { echo "lat_vs_sockperf.sh: DURATION_S must be a positive integer, got '$DUR'" >&2; exit 1; }
command -v jq >/dev/null 2>&1 || { echo "lat_vs_sockperf.sh: needs jq" >&2; exit 1; }
command -v sockperf >/dev/null 2>&1 || { echo "lat_vs_sockperf.sh: needs sockperf" >&2; exit 1; }
cd "$(dirname "$0")/.."
if [ -n "${MRC_PERF:-}" ]; then
  P=$MRC_PERF
else
  cargo build --release -q -p mrc-examples --bin mrc-perf \
    || { echo "lat_vs_sockperf.sh: cargo build of mrc-perf failed" >&2; exit 1; }
  P=${CARGO_TARGET_DIR:-target}/release/mrc-perf
fi
T=$(mktemp -d)
sockperf server -i 127.0.0.1 -p "$PORT" >"$T/server.log" 2>&1 &
SRV=$!
trap 'kill "$SRV" 2>/dev/null || true; rm -rf "$T"' EXIT
sleep 0.5
kill -0 "$SRV" 2>/dev/null || { echo "lat_vs_sockperf.sh: sockperf server failed:" >&2; cat "$T/server.log" >&2; exit 1; }

# sockperf: "median p99" in us.
sp() {
  sockperf ping-pong -i 127.0.0.1 -p "$PORT" -m 16 -t "$DUR" >"$T/sp.log" 2>&1 \
    || { echo "lat_vs_sockperf.sh: sockperf ping-pong failed:" >&2; cat "$T/sp.log" >&2; exit 1; }
  local m p
  m=$(awk '/percentile 50.000/ {print $NF}' "$T/sp.log")
  p=$(awk '/percentile 99.000/ {print $NF}' "$T/sp.log")
  [ -n "$m" ] && [ -n "$p" ] || { echo "lat_vs_sockperf.sh: no percentiles in sockperf's output:" >&2; cat "$T/sp.log" >&2; exit 1; }
  echo "$m $p"
}
# mrc-perf lat on --udp-io $1: "median p99" in us.
mrc() {
  "$P" loopback --test lat -D "$DUR" --udp-io "$1" --json >"$T/mrc.json" 2>"$T/mrc.err" \
    || { echo "lat_vs_sockperf.sh: mrc-perf --udp-io $1 failed:" >&2; cat "$T/mrc.err" >&2; exit 1; }
  jq -r '"\(.lat_us.typical) \(.lat_us.p99)"' "$T/mrc.json"
}
# mrc-perf's raw UDP ping-pong on the direct datapath: "median p99" in us.
raw() {
  "$P" baseline --test lat -D "$DUR" --udp-io direct --json >"$T/raw.json" 2>"$T/raw.err" \
    || { echo "lat_vs_sockperf.sh: mrc-perf baseline failed:" >&2; cat "$T/raw.err" >&2; exit 1; }
  jq -r '.baselines[0] | "\(.lat_us.typical) \(.lat_us.p99)"' "$T/raw.json"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15-min load average, $(nproc) CPUs)"
printf '%-4s %-22s %-22s %-22s %-22s\n' run "sockperf med/p99 us" "mrc direct med/p99" "mrc uring med/p99" "raw UDP med/p99"
for i in $(seq 1 "$RUNS"); do
  s=$(sp); d=$(mrc direct); u=$(mrc uring); r=$(raw)
  echo "$s" >>"$T/s"; echo "$d" >>"$T/d"; echo "$u" >>"$T/u"; echo "$r" >>"$T/r"
  printf '%-4s %-22s %-22s %-22s %-22s\n' "$i" "$s" "$d" "$u" "$r"
done
echo "load after:  $(cut -d' ' -f1-3 /proc/loadavg)"
col() { awk -v c="$2" '{print $c}' "$T/$1" | median; }
sm=$(col s 1); sp99=$(col s 2); dm=$(col d 1); dp99=$(col d 2); um=$(col u 1); up99=$(col u 2)
rm_=$(col r 1); rp99=$(col r 2)
echo "medians of $RUNS runs (one-way us): sockperf median $sm p99 $sp99"
awk -v n=direct -v m="$dm" -v p="$dp99" -v sm="$sm" -v sp="$sp99" 'BEGIN {printf "  mrc %-6s median %s p99 %s  ratio median %.2fx (target <= 1.5x), p99 %.2fx (target <= 2x)\n", n, m, p, m/sm, p/sp}'
awk -v n=uring -v m="$um" -v p="$up99" -v sm="$sm" -v sp="$sp99" 'BEGIN {printf "  mrc %-6s median %s p99 %s  ratio median %.2fx, p99 %.2fx\n", n, m, p, m/sm, p/sp}'
awk -v m="$dm" -v p="$dp99" -v rm="$rm_" -v rp="$rp99" 'BEGIN {printf "  raw UDP ping-pong (direct) median %s p99 %s; mrc direct over it: median %.2fx, p99 %.2fx\n", rm, rp, m/rm, p/rp}'
