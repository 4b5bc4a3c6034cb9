#!/usr/bin/env bash
# The multi-engine scaling curve (issue 23): for each K of ENGINES, `mrc-perf loopback -q K
# --engines K --verify` (K QPs per end over K engine threads per end; each QP the shape of
# scripts/baselines.sh's rows: 1 MiB messages, 4096-byte payload, 16 EVs) against the same K
# QPs over one engine thread per end (`--engines 1`), side by side: the goodput of each,
# their ratio (the engine threads' scaling at K QPs) and the process CPU per byte. Every
# figure is the median of RUNS runs, interleaved (run 1 of every row, then run 2, ...);
# the ratios are medians of per-run ratios.
#
# Usage: scripts/engines_curve.sh [RUNS] [DURATION_S]   (defaults 3 3)
# Environment:
#   MRC_PERF=PATH   that mrc-perf binary (else target/release/mrc-perf, built when missing)
#   ENGINES="1 2"   the K values (1..=16 each)
#   BURST=16        --burst-size of every run
# Output: the table on stdout, then one JSON object on the last line:
#   {burst, runs, duration_s, rows: [{engines, gbps, gbps_one_engine, ratio,
#   cpu_s_per_gb, cpu_s_per_gb_one_engine}], per_run: [...]}.
# A loopback end on a machine with C cores runs 2K engine threads and 2K test threads:
# past C/2 engines per end the curve measures the scheduler, not the engines.
set -euo pipefail
usage="usage: scripts/engines_curve.sh [RUNS] [DURATION_S] (RUNS a positive integer, DURATION_S positive seconds)"
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
RUNS=${1:-3}
DUR=${2:-3}
ENGINES=${ENGINES:-1 2}
BURST=${BURST:-16}
if ! [[ $RUNS =~ ^[1-9][0-9]*$ ]]; then
  echo "engines_curve.sh: RUNS must be a positive integer, got '$RUNS'" >&2
  echo "$usage" >&2
  exit 1
fi
if ! [[ $DUR =~ ^[0-9]*\.?[0-9]+$ && $DUR =~ [1-9] ]]; then
  echo "engines_curve.sh: DURATION_S must be a positive number of seconds, got '$DUR'" >&2
  echo "$usage" >&2
  exit 1
fi
for k in $ENGINES; do
  if ! [[ $k =~ ^[1-9][0-9]*$ ]] || [ "$k" -gt 16 ]; then
    echo "engines_curve.sh: ENGINES must hold integers in 1..=16, got '$k'" >&2
    exit 1
  fi
done
[[ $BURST =~ ^[1-9][0-9]*$ ]] || { echo "engines_curve.sh: BURST must be a positive integer, got '$BURST'" >&2; exit 1; }
command -v jq >/dev/null 2>&1 || { echo "engines_curve.sh: needs jq (apt-get install jq)" >&2; exit 1; }
cd "$(dirname "$0")/.."
P=${MRC_PERF:-}
if [ -z "$P" ]; then
  P=target/release/mrc-perf
  [ -x "$P" ] || cargo build --release -q -p mrc-examples --bin mrc-perf >&2
fi
[ -x "$P" ] || { echo "engines_curve.sh: no mrc-perf at $P" >&2; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
: >"$T/rows"
# one run: K QPs over E engines per end; appends {run, engines, qps, gbps, cpu_s_per_gb}
one() {
  local run=$1 k=$2 e=$3
  if ! "$P" loopback -q "$k" --engines "$e" -s 1048576 --paths 16 --mtu 4096 --verify \
      --burst-size "$BURST" -D "$DUR" --json \
      >"$T/out" 2>"$T/err"; then
    echo "engines_curve.sh: mrc-perf loopback -q $k --engines $e failed:" >&2
    cat "$T/err" >&2
    exit 1
  fi
  jq -c --argjson run "$run" --argjson k "$k" --argjson e "$e" \
    '{run: $run, qps: $k, engines: $e, gbps: .bw_avg_gbps, cpu_s_per_gb: .cpu_s_per_gb,
      bad_bytes: .receiver.bad_bytes}' "$T/out" >>"$T/rows"
  echo "engines_curve.sh: run $run, -q $k --engines $e: $(jq -r '.bw_avg_gbps | . * 100 | round / 100' "$T/out") Gb/s" >&2
}
for run in $(seq 1 "$RUNS"); do
  for k in $ENGINES; do
    one "$run" "$k" "$k"
    [ "$k" -gt 1 ] && one "$run" "$k" 1
  done
done
bad=$(jq -s 'map(.bad_bytes) | add' "$T/rows")
[ "$bad" = 0 ] || { echo "engines_curve.sh: --verify found $bad bad bytes" >&2; exit 1; }
summary=$(jq -s -c --argjson ks "$(printf '%s\n' $ENGINES | jq -s -c .)" '
  def median: sort | if length % 2 == 1 then .[length / 2 | floor]
    else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  . as $all
  | [ $ks[] as $k
      | ($all | map(select(.qps == $k and .engines == $k))) as $many
      | ($all | map(select(.qps == $k and .engines == 1))) as $one
      | { engines: $k,
          gbps: ($many | map(.gbps) | median),
          cpu_s_per_gb: ($many | map(.cpu_s_per_gb) | median),
          gbps_one_engine: ($one | map(.gbps) | median),
          cpu_s_per_gb_one_engine: ($one | map(.cpu_s_per_gb) | median),
          ratio: ([ $many[] as $m | $one[] | select(.run == $m.run) | $m.gbps / .gbps ]
                  | median) } ]' "$T/rows")
echo "multi-engine curve: loopback -q K -s 1048576 --paths 16 --mtu 4096 --verify --burst-size $BURST -D $DUR, medians of $RUNS runs ($(nproc) CPUs)"
printf '%-8s %-22s %-22s %-16s %-12s\n' "K" "K engines/end Gb/s" "1 engine/end Gb/s" "ratio (K / 1)" "CPU s/GB"
jq -r '.[] | [.engines, .gbps, .gbps_one_engine, .ratio, .cpu_s_per_gb] | @tsv' <<<"$summary" |
  while IFS=$'\t' read -r k g g1 r c; do
    printf '%-8s %-22.2f %-22.2f %-16.2f %-12.3f\n' "$k" "$g" "$g1" "$r" "$c"
  done
jq -c -n --argjson rows "$summary" --slurpfile per "$T/rows" --argjson burst "$BURST" \
  --argjson runs "$RUNS" --argjson dur "$DUR" \
  '{burst: $burst, runs: $runs, duration_s: $dur, rows: $rows, per_run: $per}'
