#!/usr/bin/env bash
# fabtests (libfabric's own test suite, release 1.17.1) against the `mrc` provider on
# loopback: the `functional`, `short` and `unit` suites, which pass with no failure
# (docs/LIBFABRIC.md, "fabtests", lists every Notrun and exclusion with its reason).
#
# fabtests is test input, not project code: it is built from its release tarball outside
# the repository with its own autotools (autoconf, automake, libtool, gcc, make) against
# Debian's libfabric (libfabric-dev), and the build is kept for the next run.
#
#   MRC_FABTESTS_TARBALL  the tarball (default: fabtests-1.17.1.tar.xz in the shared
#                         third_party folder beside the repository); missing, the script
#                         prints `SKIPPED: fabtests: <reason>` and exits 0
#   MRC_FABTESTS_DIR      where to build and run (default /tmp/mrc-fabtests-1.17.1)
#   MRC_FABTESTS_SUITES   the suites (default functional,short,unit)
#   MRC_FABTESTS_PROVIDER a built libmrc_fi.so to test (default: `cargo build -p mrc-fi`
#                         and its target/debug/libmrc_fi.so); .ci/run names the one its
#                         test step built, so that nothing is rebuilt
#
# Exits non-zero when a test fails or none passes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tarball=${MRC_FABTESTS_TARBALL:-$root/../shared/third_party/fabtests-1.17.1.tar.xz}
dir=${MRC_FABTESTS_DIR:-/tmp/mrc-fabtests-1.17.1}
suites=${MRC_FABTESTS_SUITES:-functional,short,unit}

if [ ! -f "$tarball" ]; then
  echo "SKIPPED: fabtests: no fabtests tarball at $tarball (set MRC_FABTESTS_TARBALL to fabtests-1.17.1.tar.xz)"
  exit 0
fi
for tool in autoconf automake libtoolize gcc make; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "SKIPPED: fabtests: $tool is missing (apt-get install autoconf automake libtool gcc make)"
    exit 0
  fi
done
if [ ! -f /usr/include/rdma/fabric.h ]; then
  echo "SKIPPED: fabtests: libfabric's headers are missing (apt-get install libfabric-dev)"
  exit 0
fi

# Build once per tarball (its checksum is the key).
sum=$(sha256sum "$tarball" | cut -d' ' -f1)
bin=$dir/inst/bin
if [ "$(cat "$dir/built" 2>/dev/null || true)" != "$sum" ] || [ ! -x "$bin/fi_rdm" ]; then
  echo "fabtests: building $(basename "$tarball") in $dir"
  rm -rf "$dir"
  mkdir -p "$dir/src"
  tar -xJf "$tarball" -C "$dir/src" --strip-components=1
  (
    cd "$dir/src"
    ./autogen.sh >"$dir/autogen.log" 2>&1
    ./configure --with-libfabric=/usr --prefix="$dir/inst" >"$dir/configure.log" 2>&1
    make -j"$(nproc)" >"$dir/make.log" 2>&1
    make install >"$dir/install.log" 2>&1
  ) || {
    echo "fabtests: the build failed; logs in $dir"
    tail -20 "$dir"/*.log
    exit 1
  }
  echo "$sum" >"$dir/built"
fi

# The provider, in a directory of its own for FI_PROVIDER_PATH (a copy: a rebuild must not
# change it under a running test).
lib=${MRC_FABTESTS_PROVIDER:-}
if [ -z "$lib" ]; then
  (cd "$root" && cargo build --locked -p mrc-fi)
  lib=$root/target/debug/libmrc_fi.so
fi
rm -rf "$dir/prov"
mkdir -p "$dir/prov"
cp "$lib" "$dir/prov/libmrc-fi.so"

# -b: out-of-band address exchange (a peer's address is its fi_getname handle, which no
# host name and port give). Excluded: the FI_EP_MSG tests (the provider is RDM only; with
# -b their servers block on the out-of-band socket the client never opens, and
# fi_msg_sockets wants -s, which -b drops); fi_multi_mr, which binds a counter to each
# memory region (fi_mr_bind with FI_REMOTE_WRITE: the transport does not say which
# region a WRITE landed in, so the provider answers -FI_ENOSYS and the test fails).
exclude="fi_cm_data,-e msg,fi_msg_sockets,fi_multi_mr"
log=$dir/run.log
set +e
(
  cd "$dir/src"
  FI_PROVIDER_PATH="$dir/prov" FI_PROVIDER=mrc scripts/runfabtests.sh -v -b -T 120 \
    -t "$suites" -e "$exclude" -p "$bin/" mrc
) 2>&1 | tee "$log"
set -e
pass=$(grep -Eo 'Total Pass +[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo 0)
fail=$(grep -Eo 'Total Fail +[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo "?")
echo "fabtests ($suites): $pass passed, $fail failed; log: $log"
if [ "$fail" != 0 ] || [ "$pass" = 0 ]; then
  grep -E '^- name|result: Fail' "$log" | grep -B1 'result: Fail' || true
  exit 1
fi
