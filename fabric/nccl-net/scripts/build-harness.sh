#!/usr/bin/env bash
# Builds the spray NCCL net plugin (release) and the C harness that drives it the way NCCL
# does (fabric/nccl-net/tests/harness.c), and installs both under one folder:
#   PREFIX/libnccl-net-spray.so   the plugin under the name NCCL_NET_PLUGIN=spray looks for
#   PREFIX/librccl-net-spray.so   a link for RCCL
#   PREFIX/harness                the harness (run it without arguments for its modes)
# Usage: build-harness.sh [--prefix DIR]   (default: target/nccl-harness in the repository)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
prefix="$root/target/nccl-harness"
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || { echo "build-harness.sh: --prefix needs a folder" >&2; exit 2; }
              prefix="$2"; shift 2 ;;
    --prefix=*) prefix="${1#--prefix=}"; shift ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-harness.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
cd "$root"
cargo build --release --locked -p mrc-nccl-net
target="${CARGO_TARGET_DIR:-$root/target}"
mkdir -p "$prefix"
install -m 0755 "$target/release/libnccl_net_spray.so" "$prefix/libnccl-net-spray.so"
ln -sf libnccl-net-spray.so "$prefix/librccl-net-spray.so"
"${CC:-gcc}" -O2 -std=c11 -Wall -Wextra -Werror -o "$prefix/harness" \
  fabric/nccl-net/tests/harness.c -ldl -pthread
echo "installed in $prefix:"
echo "  plugin : $prefix/libnccl-net-spray.so (and librccl-net-spray.so)"
echo "  harness: $prefix/harness"
echo "try: LD_LIBRARY_PATH=$prefix $prefix/harness libnccl-net-spray.so bw 524288 4000 8"
