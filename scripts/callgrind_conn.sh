#!/usr/bin/env bash
# Instructions per packet of the transport's sender plus receiver state machines, from
# callgrind: runs `examples/conn_drive MODE N` and `MODE 2N` for each MODE (write, hot, small,
# sprayed: small's packets arriving grouped by EV) and prints (Ir(2N) - Ir(N)) / (256 N),
# which removes setup. Needs valgrind.
# Usage: scripts/callgrind_conn.sh [N]   (default 20; CARGO_TARGET_DIR honoured)
set -euo pipefail
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
n=${1:-20}
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "usage: scripts/callgrind_conn.sh [N] (N a positive integer, got '$n')" >&2; exit 2; }
target=${CARGO_TARGET_DIR:-target}
cargo build -q --release -p mrc-transport --example conn_drive
bin=$target/release/examples/conn_drive
out=$(mktemp -d)
ir() {
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.$1.$2" "$bin" "$1" "$2" >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$out/cg.$1.$2"
}
for mode in write hot small sprayed; do
  a=$(ir "$mode" "$n")
  b=$(ir "$mode" $((2 * n)))
  echo "$mode: $(( (b - a) / (256 * n) )) instructions/packet (Ir $a at N=$n, $b at N=$((2 * n)))"
done
echo "callgrind files: $out"
