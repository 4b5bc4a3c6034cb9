#!/usr/bin/env bash
# Where the latency test's threads run, and what it does to the 8-byte latency (issue 46:
# `t_min` was about 6.3 us in some runs and 13.8 us in others on a 2-core host with other
# work beside it). Each run measures, in turn, `mrc-perf --test lat` (8 bytes, caller
# progress, one way, us) placed four ways:
#   loopback any     one process, both ends' threads wherever the scheduler puts them
#   loopback cpu0    one process pinned to CPU 0 (`taskset -c 0`): both ends share a core
#   pair 0|1         server on CPU 0, client on CPU 1 (two processes, one core each)
#   pair 0|0         server and client processes both on CPU 0
# first on the quiet host, then with a busy loop pinned to the last CPU (a shell
# `while :; do :; done`, as "other work beside it"). Prints the medians over the runs of
# t_min and t_typical for each placement and condition, then one JSON object with every
# run.
#
# Usage: scripts/lat_modes.sh [RUNS] [ITERS]   (defaults 5 20000)
#   MRC_PERF=PATH  that mrc-perf (default: cargo build --release, target/release/mrc-perf)
# Needs taskset (util-linux), jq and at least 2 CPUs. Loopback only.
set -euo pipefail
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
RUNS=${1:-5}
ITERS=${2:-20000}
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "lat_modes.sh: RUNS must be a positive integer, got '$RUNS'" >&2; exit 1; }
[[ $ITERS =~ ^[1-9][0-9]*$ ]] || { echo "lat_modes.sh: ITERS must be a positive integer, got '$ITERS'" >&2; exit 1; }
for t in jq taskset; do
  command -v "$t" >/dev/null 2>&1 || { echo "lat_modes.sh: needs $t" >&2; exit 1; }
done
ncpu=$(nproc)
[ "$ncpu" -ge 2 ] || { echo "lat_modes.sh: needs at least 2 CPUs, this host has $ncpu" >&2; exit 1; }
last=$((ncpu - 1))
cd "$(dirname "$0")/.."
if [ -n "${MRC_PERF:-}" ]; then
  P=$MRC_PERF
else
  cargo build --release -q -p mrc-examples --bin mrc-perf || { echo "lat_modes.sh: cargo build failed" >&2; exit 1; }
  P=${CARGO_TARGET_DIR:-target}/release/mrc-perf
fi
T=$(mktemp -d)
busy=""
cleanup() { [ -n "$busy" ] && kill "$busy" 2>/dev/null; pkill -P $$ 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
# lat PLACEMENT: the JSON's lat_us of one run.
lat() {
  case $1 in
    "loopback any") "$P" loopback --test lat -n "$ITERS" --udp-port 0 --json >"$T/c" 2>"$T/e" ;;
    "loopback cpu0") taskset -c 0 "$P" loopback --test lat -n "$ITERS" --udp-port 0 --json >"$T/c" 2>"$T/e" ;;
    "pair 0|1" | "pair 0|0")
      local scpu=0 ccpu=${1:7:1} port
      port=$((20000 + RANDOM % 20000))
      taskset -c "$scpu" "$P" server -p "$port" >/dev/null 2>"$T/se" &
      local spid=$!
      sleep 0.3
      taskset -c "$ccpu" "$P" client 127.0.0.1 -p "$port" --test lat -n "$ITERS" --json >"$T/c" 2>"$T/e" || true
      wait "$spid" || true
      ;;
  esac
  jq -c '.lat_us | {t_min_us: .min, t_typical_us: .typical, p99_us: .p99}' "$T/c" 2>/dev/null \
    || { echo "lat_modes.sh: $1 failed: $(tail -3 "$T/e")" >&2; exit 1; }
}
: >"$T/rows"
PLACES=("loopback any" "loopback cpu0" "pair 0|1" "pair 0|0")
for i in $(seq "$RUNS"); do
  for cond in quiet busy; do
    if [ "$cond" = busy ]; then
      taskset -c "$last" sh -c 'while :; do :; done' &
      busy=$!
    fi
    for pl in "${PLACES[@]}"; do
      l=$(lat "$pl")
      jq -c --argjson i "$i" --arg c "$cond" --arg p "$pl" '. + {run: $i, host: $c, placement: $p}' <<<"$l" >>"$T/rows"
      echo "lat_modes.sh: run $i/$RUNS, $cond host, $pl: $l" >&2
    done
    if [ -n "$busy" ]; then kill "$busy"; wait "$busy" 2>/dev/null || true; busy=""; fi
  done
done
jq -s -r --arg cpu "$last" '
  def med: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  . as $rows
  | "runs: \(map(.run) | max); busy: a loop pinned to CPU \($cpu); one way, us, medians of the runs",
    "| placement | quiet t_min | quiet t_typical | busy t_min | busy t_typical |",
    "| --- | --- | --- | --- | --- |",
    ( ["loopback any", "loopback cpu0", "pair 0|1", "pair 0|0"][] as $p
      | [ ["quiet", "busy"][] as $c | ($rows | map(select(.placement == $p and .host == $c)))
          | (map(.t_min_us) | med), (map(.t_typical_us) | med) ] as $v
      | "| \($p) | \($v[0]) | \($v[1]) | \($v[2]) | \($v[3]) |" )' "$T/rows"
jq -s -c '{runs: .}' "$T/rows"
