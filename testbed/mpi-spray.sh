#!/usr/bin/env bash
# mpi-spray.sh: 4 hosts of the SRv6 testbed, one mrc-perf mpi rank each, all-to-all in
# training mode; plain ECMP (the kernel hashes each EV socket's 5-tuple over the spines)
# against SRv6 spraying (`--srv6 usid --srv6-via route`: EV socket s through spine s % 4),
# ROUNDS interleaved rounds. Prints, per run, the bytes each spine received and the step
# completion p99 (the slowest stream of each step), then the medians. As root.
#
#   testbed/mpi-spray.sh [ROUNDS] [extra mrc-perf flags]
#
# MRC_PERF: the mrc-perf built with `--features mpi` (default target/release/mrc-perf);
# MRCTB_PREFIX: the testbed's namespaces (default mrctbx-, brought up here if missing and
# left up). Needs mpirun (openmpi-bin) and jq.
set -Eeuo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${1:-5}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "usage: testbed/mpi-spray.sh [ROUNDS] [extra mrc-perf flags] (ROUNDS a positive integer, got '$ROUNDS')" >&2; exit 2; }
shift || true
BIN=${MRC_PERF:-${CARGO_TARGET_DIR:-$ROOT/target}/release/mrc-perf}
export MRCTB_PREFIX=${MRCTB_PREFIX:-mrctbx-}
TB=$ROOT/testbed/mrc-testbed.sh
[ -x "$BIN" ] || { echo "no $BIN: cargo build --release -p mrc-examples --features mpi" >&2; exit 1; }
if ! "$TB" status >/dev/null 2>&1 || [ "$("$TB" plan | jq '.hosts | length')" != 4 ]; then
  "$TB" down >/dev/null
  "$TB" up --srv6 --gpus 16 --gpus-per-server 4 --spine-radix 4
fi
spines() { "$TB" counters | awk '{s[$1]+=$4} END {for (k in s) print k, s[k]}' | sort | awk '{print $2}'; }
run() { # MODE -> "s0 s1 s2 s3 p99_us p50_us goodput_gbps"
  local mode=$1 extra=()
  shift
  [ "$mode" = srv6 ] && extra=(--srv6 usid --srv6-via route)
  local before after json
  mapfile -t before < <(spines)
  json=$(timeout 300 mpirun --allow-run-as-root --oversubscribe --mca btl self,tcp -np 4 \
    "$BIN" mpi --netns "${MRCTB_PREFIX}h{rank}" --bind-net fd00:6d72:63::/48 \
    --testbed-plan "/run/mrctb/${MRCTB_PREFIX}plan.json" --pattern all-to-all \
    --mode training --on-ms 10 --off-ms 20 -n 20 -s 262144 --tx-depth 8 --verify --json \
    "${extra[@]}" "$@")
  mapfile -t after < <(spines)
  [ "$(jq '.summary.bad_bytes' <<<"$json")" = 0 ] || { echo "bad bytes" >&2; exit 1; }
  echo "$(( after[0] - before[0] )) $(( after[1] - before[1] )) $(( after[2] - before[2] )) $(( after[3] - before[3] ))" \
    "$(jq -r '[.slowest_per_burst.p99_ns / 1000, .slowest_per_burst.p50_ns / 1000, .summary.goodput_gbps] | map(. * 100 | round / 100) | join(" ")' <<<"$json")"
}
printf '%-6s %-5s %12s %12s %12s %12s %9s %12s %12s %8s\n' round mode s0_bytes s1_bytes s2_bytes s3_bytes max/mean step_p99_us step_p50_us Gbps
out=$(mktemp)
for r in $(seq 1 "$ROUNDS"); do
  for m in ecmp srv6; do
    read -r a b c d p99 p50 g < <(run "$m" "$@")
    imb=$(awk -v a="$a" -v b="$b" -v c="$c" -v d="$d" 'BEGIN {m=a; if (b>m) m=b; if (c>m) m=c; if (d>m) m=d; printf "%.3f", m / ((a+b+c+d)/4)}')
    printf '%-6s %-5s %12s %12s %12s %12s %9s %12s %12s %8s\n' "$r" "$m" "$a" "$b" "$c" "$d" "$imb" "$p99" "$p50" "$g"
    echo "$m $imb $p99 $p50 $g" >>"$out"
  done
done
for m in ecmp srv6; do
  med() { grep "^$m " "$out" | awk -v k="$1" '{print $k}' | sort -n | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
  echo "median $m: spine max/mean $(med 2), step p99 $(med 3) us, step p50 $(med 4) us, goodput $(med 5) Gb/s"
done
rm -f "$out"
