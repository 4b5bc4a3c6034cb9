#!/usr/bin/env bash
# libfabric providers side by side on loopback (issue 44, item 6): fabtests' own
# benchmarks, `fi_rdm_pingpong` (latency, usec/xfer as fabtests prints it, at 8 B and
# 4 KiB) and `fi_rdm_tagged_bw` (MB/sec at 64 KiB and 1 MiB), over the `mrc` provider and
# libfabric's `tcp;ofi_rxm` and `sockets`, interleaved (run 1 of every row, then run 2,
# ...) so that a change in the machine's load hits every provider alike. Prints the medians
# per provider and size, mrc's ratio to the best of the others, then one JSON object with
# every run.
#
# Usage: scripts/fi_perf.sh [RUNS]   (default 5)
# Environment:
#   FABTESTS_BIN   fabtests' installed bin folder (default /tmp/mrc-fabtests-1.17.1/inst/bin,
#                  what scripts/fabtests.sh builds)
#   MRC_FI_SO      the provider to test (default: cargo build --release -p mrc-fi,
#                  target/release/libmrc_fi.so)
#   ITERS_LAT      pingpong iterations (default 10000); ITERS_BW tagged_bw's (default 2000)
# Each pair is a server and a client bound to 127.0.0.1 (`-s 127.0.0.1`, the client
# naming the server's host), under a 60 s timeout; a failed pair is tried once more, then
# the script exits 1 with its output.
set -euo pipefail
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
RUNS=${1:-5}
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "fi_perf.sh: RUNS must be a positive integer, got '$RUNS'" >&2; exit 1; }
B=${FABTESTS_BIN:-/tmp/mrc-fabtests-1.17.1/inst/bin}
ITERS_LAT=${ITERS_LAT:-10000}
ITERS_BW=${ITERS_BW:-2000}
for t in fi_rdm_pingpong fi_rdm_tagged_bw; do
  [ -x "$B/$t" ] || { echo "fi_perf.sh: no $B/$t (build fabtests: scripts/fabtests.sh, or set FABTESTS_BIN)" >&2; exit 1; }
done
command -v jq >/dev/null 2>&1 || { echo "fi_perf.sh: needs jq" >&2; exit 1; }
cd "$(dirname "$0")/.."
if [ -z "${MRC_FI_SO:-}" ]; then
  cargo build --release -q -p mrc-fi || { echo "fi_perf.sh: cargo build -p mrc-fi failed" >&2; exit 1; }
  MRC_FI_SO=${CARGO_TARGET_DIR:-target}/release/libmrc_fi.so
fi
T=$(mktemp -d)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$T"' EXIT
mkdir "$T/prov"
cp "$MRC_FI_SO" "$T/prov/libmrc-fi.so"
# pair TOOL PROVIDER SIZE ITERS: the client's last table line.
pair() {
  local tool=$1 prov=$2 size=$3 iters=$4 try rc addr=(-s 127.0.0.1)
  for try in 1 2; do
    FI_PROVIDER_PATH=$T/prov timeout 60 "$B/$tool" -p "$prov" "${addr[@]}" -S "$size" -I "$iters" >"$T/server" 2>&1 &
    local spid=$!
    sleep 0.5
    rc=0
    FI_PROVIDER_PATH=$T/prov timeout 60 "$B/$tool" -p "$prov" "${addr[@]}" -S "$size" -I "$iters" 127.0.0.1 >"$T/client" 2>&1 || rc=$?
    wait "$spid" 2>/dev/null || rc=${rc:-1}
    if [ "$rc" = 0 ] && grep -qE '^[0-9]+[kmg]?\s' "$T/client"; then
      grep -E '^[0-9]+[kmg]?\s' "$T/client" | tail -1
      return 0
    fi
    echo "fi_perf.sh: $tool -p '$prov' -S $size failed (try $try): $(tail -3 "$T/client" | tr '\n' '|')" >&2
    sleep 1
  done
  exit 1
}
: >"$T/rows"
PROVS=("mrc" "tcp;ofi_rxm" "sockets")
for i in $(seq "$RUNS"); do
  for prov in "${PROVS[@]}"; do
    for size in 8 4096; do
      # bytes iters total time MB/sec usec/xfer Mxfers/sec
      l=$(pair fi_rdm_pingpong "$prov" "$size" "$ITERS_LAT")
      us=$(awk '{print $6}' <<<"$l")
      jq -nc --argjson i "$i" --arg p "$prov" --argjson s "$size" --argjson v "$us" \
        '{run: $i, provider: $p, test: "pingpong", size: $s, usec_per_xfer: $v}' >>"$T/rows"
      echo "fi_perf.sh: run $i/$RUNS: $prov pingpong $size B: $us usec/xfer" >&2
    done
    for size in 65536 1048576; do
      l=$(pair fi_rdm_tagged_bw "$prov" "$size" "$ITERS_BW")
      mbs=$(awk '{print $5}' <<<"$l")
      jq -nc --argjson i "$i" --arg p "$prov" --argjson s "$size" --argjson v "$mbs" \
        '{run: $i, provider: $p, test: "tagged_bw", size: $s, mb_per_sec: $v}' >>"$T/rows"
      echo "fi_perf.sh: run $i/$RUNS: $prov tagged_bw $size B: $mbs MB/sec" >&2
    done
  done
done
jq -s -r '
  def med: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def cell($t; $s; $p; $f): map(select(.test == $t and .size == $s and .provider == $p) | .[$f]) | med;
  . as $rows
  | "runs: \(map(.run) | max)",
    "| test | size | mrc | tcp;ofi_rxm | sockets | mrc / best other |",
    "| --- | --- | --- | --- | --- | --- |",
    ( [["pingpong", 8, "usec_per_xfer"], ["pingpong", 4096, "usec_per_xfer"],
       ["tagged_bw", 65536, "mb_per_sec"], ["tagged_bw", 1048576, "mb_per_sec"]][]
      | . as [$t, $s, $f]
      | [ $rows | cell($t; $s; "mrc"; $f), cell($t; $s; "tcp;ofi_rxm"; $f), cell($t; $s; "sockets"; $f) ] as [$m, $x, $k]
      | (if $f == "usec_per_xfer" then ([$x, $k] | min) else ([$x, $k] | max) end) as $best
      | "| \($t) (\($f)) | \($s) | \($m) | \($x) | \($k) | \(($m / $best * 100 | round) / 100) |" )' "$T/rows"
jq -s -c '{runs: .}' "$T/rows"
