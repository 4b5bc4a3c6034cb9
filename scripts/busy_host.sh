#!/usr/bin/env bash
# A busy host (issue 46): how much of its quiet goodput mrc keeps when one CPU is taken by
# another program, beside kernel TCP doing the same, measured side by side. Each run
# measures its rows in turn, mrc-perf loopback --verify (each of VARIANTS) and kernel TCP
# (mrc-perf baseline's TCP row: iperf3 when installed, else its own TCP pair), on the
# quiet host, then all again with a busy loop pinned to the host's last CPU (`taskset -c
# LAST`, a shell `while :; do :; done`, killed after the rows). The shares (busy / quiet)
# are per run, so a change in the machine's load hits every row alike; the medians of the
# runs are printed, then one JSON object with every run.
#
# Usage: scripts/busy_host.sh [RUNS] [DURATION_S]   (defaults 5 3)
# Environment:
#   MRC_PERF=PATH   that mrc-perf (default: cargo build --release, target/release/mrc-perf)
#   MRC_ARGS="..."  more flags for every mrc row (e.g. "--burst-size 16")
#   VARIANTS="A;B"  mrc rows to compare, `;`-separated flag sets measured in turn in every
#                   run (e.g. "--spin-us 50;--spin-us 0"); default one row, no flags
# Needs taskset (util-linux), jq, and at least 2 CPUs. Loopback only; kernel-chosen ports.
set -euo pipefail
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
RUNS=${1:-5}
DUR=${2:-3}
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "busy_host.sh: RUNS must be a positive integer, got '$RUNS'" >&2; exit 1; }
[[ $DUR =~ ^[0-9]*\.?[0-9]+$ && $DUR =~ [1-9] ]] || { echo "busy_host.sh: DURATION_S must be positive seconds, got '$DUR'" >&2; exit 1; }
for t in jq taskset; do
  command -v "$t" >/dev/null 2>&1 || { echo "busy_host.sh: needs $t" >&2; exit 1; }
done
ncpu=$(nproc)
[ "$ncpu" -ge 2 ] || { echo "busy_host.sh: needs at least 2 CPUs, this host has $ncpu" >&2; exit 1; }
last=$((ncpu - 1))
cd "$(dirname "$0")/.."
if [ -n "${MRC_PERF:-}" ]; then
  P=$MRC_PERF
else
  cargo build --release -q -p mrc-examples --bin mrc-perf || { echo "busy_host.sh: cargo build failed" >&2; exit 1; }
  P=${CARGO_TARGET_DIR:-target}/release/mrc-perf
fi
T=$(mktemp -d)
busy=""
cleanup() { [ -n "$busy" ] && kill "$busy" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
# shellcheck disable=SC2086 # MRC_ARGS is words
mrc() {
  # shellcheck disable=SC2086 # flag sets are words
  "$P" loopback -s 1048576 --paths 16 --mtu 4096 -D "$DUR" --udp-port 0 --verify --json ${MRC_ARGS:-} $1 >"$T/m" 2>"$T/e" \
    || { echo "busy_host.sh: mrc-perf loopback failed:" >&2; cat "$T/e" >&2; exit 1; }
  [ "$(jq -r '.receiver.bad_bytes' "$T/m")" = 0 ] || { echo "busy_host.sh: bad bytes" >&2; exit 1; }
  jq -r '.bw_avg_gbps' "$T/m"
}
tcp() {
  "$P" baseline -s 1048576 --mtu 4096 -D "$DUR" --json >"$T/b" 2>"$T/e" \
    || { echo "busy_host.sh: mrc-perf baseline failed:" >&2; cat "$T/e" >&2; exit 1; }
  jq -r '.baselines[1].gbps' "$T/b"
}
: >"$T/rows"
IFS=';' read -r -a variants <<<"${VARIANTS:-}"
[ "${#variants[@]}" -gt 0 ] || variants=("")
for i in $(seq "$RUNS"); do
  for cond in quiet busy; do
    if [ "$cond" = busy ]; then
      taskset -c "$last" sh -c 'while :; do :; done' &
      busy=$!
    fi
    for v in "${variants[@]}"; do
      g=$(mrc "$v")
      jq -nc --argjson i "$i" --arg c "$cond" --arg v "mrc ${v:-(defaults)}" --argjson g "$g" \
        '{run: $i, host: $c, row: $v, gbps: $g}' >>"$T/rows"
      echo "busy_host.sh: run $i/$RUNS, $cond host: mrc ${v:-(defaults)} $g Gb/s" >&2
    done
    g=$(tcp)
    jq -nc --argjson i "$i" --arg c "$cond" --argjson g "$g" '{run: $i, host: $c, row: "kernel TCP", gbps: $g}' >>"$T/rows"
    echo "busy_host.sh: run $i/$RUNS, $cond host: kernel TCP $g Gb/s" >&2
    if [ -n "$busy" ]; then kill "$busy"; wait "$busy" 2>/dev/null || true; busy=""; fi
  done
done
jq -s -r --arg cpu "$last" '
  def med: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def r2: . * 100 | round / 100;
  . as $rows
  | "runs: \(map(.run) | max), busy loop on CPU \($cpu)",
    "| row | quiet Gb/s | busy Gb/s | share kept (busy / quiet, median of per-run ratios) |",
    "| --- | --- | --- | --- |",
    ( $rows | map(.row) | unique[] as $r
      | ($rows | map(select(.row == $r))) as $x
      | ([$x[] | select(.host == "quiet") | .gbps] | med | r2) as $q
      | ([$x[] | select(.host == "busy") | .gbps] | med | r2) as $b
      | ([ $x | group_by(.run)[] | (map(select(.host == "busy") | .gbps)[0] / map(select(.host == "quiet") | .gbps)[0]) ] | med | r2) as $s
      | "| \($r) | \($q) | \($b) | \($s) |" )' "$T/rows"
jq -s -c '{runs: .}' "$T/rows"
