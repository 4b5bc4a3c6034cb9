#!/usr/bin/env bash
# rxe-lab.sh: the verbs datapath (`--fabric verbs`) on a real RDMA device, Soft-RoCE
# (rdma_rxe), in throw-away qemu VMs (issue 20). The host kernel needs no RDMA support.
#
#   testbed/rxe-lab.sh [PART...]     PART: single, netem, soak, two-hosts, two-planes (the
#                                    default: these five, what .ci/run runs), perftest, srv6
#   testbed/rxe-lab.sh prepare       only fetch and build the cached kernel and rootfs
#   testbed/rxe-lab.sh script FILE   boot one VM, add rxe0 on lo, run FILE (busybox sh;
#                                    mrc-perf and the test binaries on PATH and in
#                                    /lab/tests) with its output on the terminal
#   testbed/rxe-lab.sh two-hosts-script FILE_A FILE_B
#                                    two-hosts' two VMs and rxe0 on each eth0, then FILE_A
#                                    in VM A (10.0.0.1), FILE_B in VM B (10.0.0.2), both at
#                                    once; each sees LAB_ADDR (its address), LAB_PEER (the
#                                    other's) and LAB_GID (rxe0's IPv4 GID index); output on
#                                    the terminal, prefixed [hosta] / [hostb]; JSON lines a
#                                    script writes to fd 3 join the results
#   testbed/rxe-lab.sh two-planes-script FILE_A FILE_B
#                                    two-planes' two VMs (two NICs each, rxe0 on eth0 and
#                                    rxe1 on eth1), then FILE_A in VM A, FILE_B in VM B, as
#                                    two-hosts-script, with LAB_ADDR/LAB_PEER the plane-0
#                                    addresses, LAB_ADDR1/LAB_PEER1 plane 1's, LAB_GID the
#                                    IPv4 GID index of both devices and LAB_PLANE_DEVICES
#                                    "rxe0,rxe1" (lib_mrc.so's MRC_PLANE_DEVICES, e.g.
#                                    testbed/ocp-bench/planes-*.sh)
#                                    (script and the two *-script parts come alone, with
#                                    exactly their readable files: anything else exits 2)
#
#   single     one VM, rxe0 on lo: lib_mrc.so's C checks (fabric/ocp-mrc/c/mrc_check.c,
#              server and client; mrc_ctl_check.c, the controller API on the device), mrc-perf loopback and client/server with --verify (bw,
#              lat), the error paths (wrong device, wrong GID index, MTU above the port's),
#              and the real-device test binaries (fabric/tests/verbs_rxe.rs,
#              verbs_no_device.rs, examples' perf_verbs.rs) against rxe0
#   two-hosts  two VMs back to back through qemu's socket netdev on 127.0.0.1, rxe on each
#              virtio NIC: mrc-perf server in one, client --verify in the other; the RoCE v2
#              packets between them are captured on the host side (filter-dump) and tshark
#              counts one UDP source port per EV
#   two-planes two VMs with two virtio NICs each, NIC n of one to NIC n of the other (plane
#              n: 10.n.0.0/24), rxe0 and rxe1 on each: mrc-perf server and client with
#              `-d rxe0,rxe1` (one endpoint over both devices, EV i on plane i mod 2), the
#              client's eth1 set down 2 s into a 6 s --verify run and up again 2 s later:
#              every byte verified, plane 1 out by its port once and back; then lib_mrc.so's
#              C checks (mrc_check) between the VMs over both devices (MRC_PLANE_DEVICES)
#   perftest   beside perftest in one VM: ib_write_bw, ib_send_bw -c UD, ib_write_lat and
#              mrc-perf --fabric verbs at the same sizes (numbers reported, not asserted)
#   netem      the UDP datapath (mrc-perf loopback --verify) under the guest kernel's netem:
#              delay, loss, reordering, duplication
#   soak       the chaos soak (examples/tests/soak.rs: mrc-perf server and client --verify
#              in two namespaces, seeded faults) for 30 s with the guest kernel's netem
#              kinds among its faults; one check per soak run
#   srv6       the SRv6 testbed test (examples/tests/testbed.rs: a 2-host, 2-leaf, 4-spine
#              fabric of network namespaces, transfers steered over every spine, a spine
#              link taken down) on the guest's Debian kernel, which has the SRv6
#              lightweight tunnels the CI host's kernel lacks; MRC_SRV6_REQUIRE=1 (a skip
#              fails); then the same steering over two planes
#              (examples/tests/testbed_planes_srv6.rs: up --planes 2 --srv6, each EV
#              through a spine of its own plane, plane 1 pulled mid-run); then
#              examples/tests/mpi.rs's testbed test (one rank per testbed
#              host under the guest's Open MPI; its base adds openmpi-bin and coreutils:
#              mrc-testbed.sh's `counters` sorts with `sort -V`, which busybox lacks); in a
#              VM of its own (.ci/run adds it where the host kernel lacks them)
#
# Every check prints `PASS name: detail` or `FAIL name: detail`, and one JSON line
# ({"check","ok","detail",...}) goes to target/rxe-lab/results.jsonl; the last line is the
# summary. Exit status 0 only when every expected check ran and passed.
#
# Environment:
#   MRC_LAB_PROFILE   cargo profile of mrc-perf: debug (default: what `cargo test
#                     --workspace --features mrc-fabric/verbs` already built) or release
#                     (for the perftest part's numbers); the test binaries are always debug
#   MRC_LAB_CACHE     cache directory [target/rxe-lab]; kernel, rootfs and initramfs are
#                     kept there keyed by the kernel package version and the package list,
#                     so a second run skips all preparation (and needs no network)
#   MRC_LAB_TIMEOUT   seconds one VM may run before it is killed [240]
#   MRC_LAB_SRV6_TIMEOUT  the same for the srv6 part's VM [600]
#   MRC_LAB_SMP       vCPUs of the single VM [2] (the two-hosts VMs get 1 each)
#   MRC_LAB_FEATURES  cargo features of the test build to take the binaries from
#                     [mrc-fabric/verbs]; mrc-fabric/verbs is always added
#   MRC_LAB_KEEP=1    keep the per-run work directory (console logs, pcap)
#   MRC_LAB_EXTRA     a directory copied into the VM as /lab/extra (e.g. programs built
#                     elsewhere against lib_mrc.so, for `script FILE`; into both VMs for
#                     `two-hosts-script` and `two-planes-script`)
#
# Host packages (Debian): qemu-system-x86 mmdebstrap cpio kmod xz-utils tshark jq, and the
# verbs build's libibverbs-dev librdmacm-dev libclang-dev pkg-config. Network: only the
# Debian mirror, and only while preparing. Nothing leaves the VMs: single runs with
# `-nic none`; two-hosts connects the two VMs by a TCP socket on 127.0.0.1 only.
set -Eeuo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
CACHE=${MRC_LAB_CACHE:-$TARGET_DIR/rxe-lab}
PROFILE=${MRC_LAB_PROFILE:-debug}
VM_TIMEOUT=${MRC_LAB_TIMEOUT:-240}
# The srv6 part's VM runs three testbed tests (one plane, two planes, MPI): longer.
SRV6_TIMEOUT=${MRC_LAB_SRV6_TIMEOUT:-600}
SMP=${MRC_LAB_SMP:-2}
# The features of the `cargo test --workspace` build whose binaries the lab carries in (the
# same as that build's, or cargo rebuilds): .ci/run passes its own.
FEATURES=${MRC_LAB_FEATURES:-mrc-fabric/verbs}
case ",$FEATURES," in *,mrc-fabric/verbs,*) ;; *) FEATURES="mrc-fabric/verbs,$FEATURES" ;; esac
# lib_mrc.so (fabric/ocp-mrc) and its C checks ride along too.
case ",$FEATURES," in *,mrc-ocp/verbs,*) ;; *) FEATURES="$FEATURES,mrc-ocp/verbs" ;; esac
SUITE=bookworm
MIRROR=${MRC_LAB_MIRROR:-http://deb.debian.org/debian}
# Bumped whenever the way the rootfs is built changes (part of the cache key).
PREP_VERSION=3
GUEST_PKGS=busybox-static,kmod,iproute2,jq,libibverbs1,ibverbs-providers,ibverbs-utils,perftest
# Modules the guest loads (their dependencies come along).
# rdma_rxe computes the RoCE ICRC with the kernel's crypto "crc32", a module of its own.
GUEST_MODS="rdma_rxe ib_uverbs crc32_generic sch_netem virtio_net virtio_pci"

# The soak role (examples/tests/soak.rs in the guest): nft for its loss, black-hole,
# duplication and reorder rules, veth for its two namespaces, HTB for its reorder class,
# the sock_diag modules for its `ss`.
GUEST_PKGS="$GUEST_PKGS,nftables"
GUEST_MODS="$GUEST_MODS veth nf_tables nft_numgen nft_dup_netdev sch_htb inet_diag tcp_diag udp_diag"
# The srv6 role (examples/tests/testbed.rs): testbed/mrc-testbed.sh is a bash script; the
# rest it needs (ip, ss, jq, veth, nftables) the other roles brought already.
GUEST_PKGS="$GUEST_PKGS,bash"

say() { printf 'rxe-lab: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 2; }
now_ms() { date +%s%3N; }

# --- cleanup: every qemu this script started is killed by its pid on any exit ---------
QEMU_PIDS=()
WORK=""
cleanup() {
  local rc=$?
  set +e
  for p in "${QEMU_PIDS[@]}"; do
    kill "$p" 2>/dev/null && wait "$p" 2>/dev/null
  done
  if [ -n "$WORK" ] && [ "${MRC_LAB_KEEP:-0}" != 1 ] && [ "$rc" = 0 ]; then
    rm -rf "$WORK"
  elif [ -n "$WORK" ]; then
    say "work directory kept: $WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

need_tools() {
  local missing=()
  for t in qemu-system-x86_64 mmdebstrap cpio depmod modprobe xz tshark jq strip apt-get dpkg gcc make; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    die "missing host tools: ${missing[*]} (Debian: apt-get install -y qemu-system-x86 mmdebstrap cpio kmod xz-utils tshark jq binutils gcc make)"
  fi
}

# --- preparation (cached) ---------------------------------------------------------------
# The kernel: the package linux-image-amd64 depends on, unless MRC_LAB_KERNEL names one.
kernel_pkg() {
  if [ -n "${MRC_LAB_KERNEL:-}" ]; then echo "$MRC_LAB_KERNEL"; return; fi
  local p
  p=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  if [ -z "$p" ] && [ "$(id -u)" = 0 ]; then
    apt-get update -qq >/dev/null 2>&1 || true
    p=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  fi
  [ -n "$p" ] || die "apt-cache knows no linux-image-amd64 (run apt-get update, or set MRC_LAB_KERNEL=linux-image-6.1.0-NN-amd64)"
  echo "$p"
}

prepare_kernel() {
  KPKG=$(kernel_pkg)
  KVER=${KPKG#linux-image-}
  KDIR=$CACHE/kernel-$KPKG-$(printf '%s' "$GUEST_MODS" | sha256sum | cut -c1-8)
  if [ -f "$KDIR/done" ]; then return; fi
  local t0; t0=$(now_ms)
  say "preparing kernel $KPKG (apt-get download, dpkg -x, vmlinux from the bzImage)"
  rm -rf "$KDIR" "$KDIR.tmp"
  mkdir -p "$KDIR.tmp"
  (
    cd "$KDIR.tmp"
    if ! apt-get download "$KPKG" >apt.log 2>&1; then
      say "apt-get download $KPKG failed; apt-get update and retry"
      apt-get update -qq >/dev/null 2>&1 || true
      apt-get download "$KPKG" >apt.log 2>&1 || { cat apt.log >&2; exit 1; }
    fi
  ) || die "could not download $KPKG"
  dpkg -x "$KDIR.tmp"/"$KPKG"_*.deb "$KDIR.tmp/x"
  local bz="$KDIR.tmp/x/boot/vmlinuz-$KVER"
  [ -f "$bz" ] || die "$KPKG has no /boot/vmlinuz-$KVER"
  # The bzImage carries the kernel as an xz stream (CONFIG_KERNEL_XZ): the uncompressed ELF
  # vmlinux boots directly through its PVH entry, about twice as fast as the bzImage under
  # TCG. (scripts/extract-vmlinux does the same search for every compressor.)
  local off
  off=$(grep -abo $'\xfd7zXZ\x00' "$bz" | head -1 | cut -d: -f1 || true)
  if [ -n "$off" ]; then
    tail -c +"$((off + 1))" "$bz" | xz -dc >"$KDIR.tmp/vmlinux" 2>/dev/null || true
  fi
  if [ -s "$KDIR.tmp/vmlinux" ] && head -c 4 "$KDIR.tmp/vmlinux" | grep -q $'^\x7fELF'; then
    KIMG=vmlinux
  else
    say "no xz-compressed vmlinux inside the bzImage: booting the bzImage"
    cp "$bz" "$KDIR.tmp/vmlinux"
  fi
  # The modules the guest needs and their dependencies, with a fresh modules.dep.
  local mroot="$KDIR.tmp/x"
  depmod -b "$mroot" "$KVER"
  mkdir -p "$KDIR.tmp/mods"
  local m f
  for m in $GUEST_MODS; do
    modprobe -d "$mroot" -S "$KVER" --show-depends "$m" | awk '$1 == "insmod" {print $2}'
  done | sort -u | while read -r f; do
    rel=${f#"$mroot"/}
    mkdir -p "$KDIR.tmp/mods/$(dirname "$rel")"
    cp "$f" "$KDIR.tmp/mods/$rel"
  done
  cp "$mroot/lib/modules/$KVER/modules.order" "$mroot/lib/modules/$KVER/modules.builtin"* \
    "$KDIR.tmp/mods/lib/modules/$KVER/" 2>/dev/null || true
  depmod -b "$KDIR.tmp/mods" "$KVER"
  grep -E '^CONFIG_(RDMA_RXE|NET_SCH_NETEM|PVH)=' "$mroot/boot/config-$KVER" >"$KDIR.tmp/config" || true
  rm -rf "$KDIR.tmp/x" "$KDIR.tmp"/*.deb
  echo "$KPKG" >"$KDIR.tmp/done"
  mv "$KDIR.tmp" "$KDIR"
  say "kernel ready in $(( ($(now_ms) - t0) ))ms: $KDIR"
}

prepare_rootfs() {
  local key
  key=$(printf '%s\n' "$SUITE" "$GUEST_PKGS" "$PREP_VERSION" "$(basename "$KDIR")" | sha256sum | cut -c1-12)
  BASE=$CACHE/base-$key.cpio
  if [ -f "$BASE" ]; then return; fi
  local t0; t0=$(now_ms)
  say "preparing rootfs (mmdebstrap --variant=extract $SUITE: $GUEST_PKGS)"
  local d="$CACHE/rootfs.tmp"
  rm -rf "$d" "$d.tar"
  mkdir -p "$d"
  mmdebstrap --quiet --variant=extract --include="$GUEST_PKGS" "$SUITE" "$d.tar" "$MIRROR" \
    >"$CACHE/mmdebstrap.log" 2>&1 || { tail -20 "$CACHE/mmdebstrap.log" >&2; die "mmdebstrap failed"; }
  tar -C "$d" -xf "$d.tar"
  rm -f "$d.tar"
  # What a VM that lives for seconds does not need.
  rm -rf "$d"/usr/share/{man,doc,locale,info,lintian,bash-completion,perl5,misc} \
    "$d"/var/cache/* "$d"/var/lib/apt "$d"/lib/udev/hwdb.d
  # busybox applets where Debian's packages left no binary of their own.
  local a
  for a in $("$d/bin/busybox" --list); do
    [ -e "$d/bin/$a" ] || [ -e "$d/sbin/$a" ] || [ -e "$d/usr/bin/$a" ] || [ -e "$d/usr/sbin/$a" ] \
      || ln -s busybox "$d/bin/$a"
  done
  cp -a "$KDIR/mods/lib/modules" "$d/lib/"
  mkdir -p "$d"/{proc,sys,dev,tmp,run,lab}
  # Package versions, for the report.
  (cd "$d/var/lib/dpkg" 2>/dev/null && awk '/^Package:/ {p=$2} /^Version:/ {print p, $2}' status 2>/dev/null) \
    >"$CACHE/base-$key.packages" || true
  cat >"$d/init" <<'EOF'
#!/bin/busybox sh
# rxe-lab guest init: mounts, loads what the run needs, runs /lab/guest.sh ROLE with
# results on the second serial port (ttyS1), then powers off.
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox mount -t devtmpfs dev /dev
/bin/busybox mount -t tmpfs tmp /tmp
export PATH=/lab/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp
role=$(sed -n 's/.*mrclab\.role=\([a-z0-9,-]*\).*/\1/p' /proc/cmdline)
echo "rxe-lab guest: role $role, kernel $(uname -r), $(nproc) vCPUs, up $(cut -d' ' -f1 /proc/uptime) s"
ip link set lo up
sh /lab/guest.sh "$role" >/dev/ttyS1 2>/dev/ttyS0
echo "rxe-lab guest: done after $(cut -d' ' -f1 /proc/uptime) s"
poweroff -f
EOF
  chmod 755 "$d/init"
  (cd "$d" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --owner 0:0 --quiet) >"$BASE.tmp"
  mv "$BASE.tmp" "$BASE"
  rm -rf "$d"
  say "rootfs ready in $(( ($(now_ms) - t0) ))ms: $BASE ($(du -h "$BASE" | cut -f1))"
}

# --- the binaries carried in ------------------------------------------------------------
build_binaries() {
  local t0; t0=$(now_ms)
  say "cargo test --workspace --no-run --features $FEATURES (a no-op after \`cargo test\` with the same features)"
  # The debug test binaries and mrc-perf, from the same build `cargo test --workspace
  # --features mrc-fabric/verbs,mrc-ocp/verbs` makes (README, .ci/run): nothing is rebuilt after it.
  local art
  art=$(cargo test --workspace --locked --no-run -q --message-format=json --features "$FEATURES" 2>"$CACHE/cargo.log" \
    | jq -r 'select(.reason == "compiler-artifact" and .executable != null)
             | "\(.target.kind[0]) \(.target.name) \(.profile.test) \(.executable)"') \
    || { tail -20 "$CACHE/cargo.log" >&2; die "cargo test --no-run with the verbs feature failed"; }
  TEST_BINS=$(awk '$3 == "true" && ($2 == "verbs_rxe" || $2 == "verbs_no_device" || $2 == "perf_verbs") {print $4}' <<<"$art")
  [ "$(wc -w <<<"$TEST_BINS")" = 3 ] || die "expected the test binaries verbs_rxe, verbs_no_device, perf_verbs; cargo built: $TEST_BINS"
  # The chaos soak, for the soak part (examples/tests/soak.rs).
  # (tests/ has a `soak` of its own, the simulator's: the one with the chaos test.)
  SOAK_BIN=""
  for b in $(awk '$3 == "true" && $2 == "soak" {print $4}' <<<"$art"); do
    # (Not `| grep -q`: under pipefail the binary's SIGPIPE would fail the test.)
    if [[ $'\n'"$("$b" --list 2>/dev/null)"$'\n' == *$'\nchaos_soak_on_real_sockets: test\n'* ]]; then SOAK_BIN=$b; fi
  done
  [ -n "$SOAK_BIN" ] || die "cargo built no soak test binary with chaos_soak_on_real_sockets (examples/tests/soak.rs)"
  TEST_BINS="$TEST_BINS $SOAK_BIN"
  # The SRv6 testbed test and the mrc-sim that plans its fabric, for the srv6 part.
  SIM_BIN=""
  if [[ " $PARTS " == *" srv6 "* ]]; then
    local tb
    tb=$(awk '$3 == "true" && $2 == "testbed" {print $4}' <<<"$art")
    [ "$(wc -w <<<"$tb")" = 1 ] || die "expected one testbed test binary (examples/tests/testbed.rs); cargo built: $tb"
    TEST_BINS="$TEST_BINS $tb"
    # examples/tests/testbed_planes_srv6.rs: the SRv6 steering over two planes
    tb=$(awk '$3 == "true" && $2 == "testbed_planes_srv6" {print $4}' <<<"$art")
    [ "$(wc -w <<<"$tb")" = 1 ] || die "expected one testbed_planes_srv6 test binary (examples/tests/testbed_planes_srv6.rs); cargo built: $tb"
    TEST_BINS="$TEST_BINS $tb"
    # examples/tests/mpi.rs (its testbed test; libfabric's tests have an `mpi` too)
    local mpi
    mpi=$(cargo test --workspace --locked --no-run -q --message-format=json --features "$FEATURES" 2>>"$CACHE/cargo.log" \
      | jq -r 'select(.reason == "compiler-artifact" and .profile.test and .target.name == "mpi"
                      and (.target.src_path | endswith("/examples/tests/mpi.rs"))) | .executable')
    [ "$(wc -w <<<"$mpi")" = 1 ] || die "expected one mpi test binary of examples/tests/mpi.rs (the mpi feature: MRC_LAB_FEATURES=...,mrc-examples/mpi); cargo built: $mpi"
    TEST_BINS="$TEST_BINS $mpi"
    SIM_BIN=$(awk '$1 == "bin" && $2 == "mrc-sim" && $3 == "false" {print $4}' <<<"$art")
    [ -x "$SIM_BIN" ] || die "no debug mrc-sim among the build's artifacts"
  fi
  if [ "$PROFILE" = release ]; then
    say "cargo build --release -p mrc-examples --bin mrc-perf --features mrc-fabric/verbs"
    cargo build --release --locked -q -p mrc-examples --bin mrc-perf --features mrc-fabric/verbs \
      || die "cargo build --release of mrc-perf failed"
    PERF_BIN=$TARGET_DIR/release/mrc-perf
  else
    PERF_BIN=$(awk '$1 == "bin" && $2 == "mrc-perf" && $3 == "false" {print $4}' <<<"$art")
  fi
  [ -x "$PERF_BIN" ] || die "no mrc-perf binary ($PROFILE)"
  # lib_mrc.so (the cdylib of fabric/ocp-mrc) and the project's C program against it.
  MRC_SO=$(cargo test --workspace --locked --no-run -q --message-format=json --features "$FEATURES" 2>>"$CACHE/cargo.log" \
    | jq -r 'select(.reason == "compiler-artifact" and .target.name == "_mrc") | .filenames[] | select(endswith("lib_mrc.so"))' | tail -n 1)
  [ -f "$MRC_SO" ] || die "no lib_mrc.so among the build's artifacts (features $FEATURES)"
  mkdir -p "$CACHE/ocp"
  make -s -C fabric/ocp-mrc/c LIB_DIR="$(dirname "$MRC_SO")" OUT="$CACHE/ocp" >&2 \
    || die "building fabric/ocp-mrc/c (gcc, libibverbs-dev) failed"
  say "binaries ready in $(( $(now_ms) - t0 ))ms: $PERF_BIN"
}

# The per-run overlay: binaries (debug info stripped), the guest script, and any shared
# library a binary needs that the rootfs lacks. Appended to the base as a second
# uncompressed cpio archive.
make_initrd() {
  local o="$WORK/overlay"
  mkdir -p "$o/lab/bin" "$o/lab/tests"
  strip --strip-debug -o "$o/lab/bin/mrc-perf" "$PERF_BIN"
  local b name
  for b in $TEST_BINS; do
    name=$(basename "$b" | sed 's/-[0-9a-f]\{16\}$//')
    strip --strip-debug -o "$o/lab/tests/$name" "$b"
  done
  # perf_verbs.rs runs mrc-perf from the path cargo compiled into it (CARGO_BIN_EXE). The
  # guest links it there at start (guest.sh): a path under /tmp (a clone in /tmp) would be
  # hidden by the tmpfs the guest's init mounts on /tmp.
  echo "$TARGET_DIR/debug/mrc-perf" >"$o/lab/perf_bin_path"
  # The testbed test likewise runs mrc-sim (CARGO_BIN_EXE_mrc-sim) and
  # testbed/mrc-testbed.sh (from CARGO_MANIFEST_DIR) by the paths compiled into it: the
  # guest links each LINK to its TARGET at start (/lab/links: `LINK TARGET` lines).
  : >"$o/lab/links"
  if [ -n "$SIM_BIN" ]; then
    strip --strip-debug -o "$o/lab/bin/mrc-sim" "$SIM_BIN"
    mkdir -p "$o/lab/testbed"
    cp testbed/mrc-testbed.sh "$o/lab/testbed/"
    # (CARGO_MANIFEST_DIR/../testbed: the examples directory must exist for the `..`.)
    printf '%s %s\n' "$SIM_BIN" /lab/bin/mrc-sim "$ROOT/testbed" /lab/testbed >>"$o/lab/links"
    echo "$ROOT/examples" >>"$o/lab/links"
  fi
  cp testbed/rxe-guest.sh "$o/lab/guest.sh"
  cp testbed/ocp-bench/planes-check-server.sh testbed/ocp-bench/planes-check-client.sh "$o/lab/"
  strip --strip-debug -o "$o/lab/bin/lib_mrc.so" "$MRC_SO"
  strip --strip-debug -o "$o/lab/bin/mrc_check" "$CACHE/ocp/mrc_check"
  strip --strip-debug -o "$o/lab/bin/mrc_ctl_check" "$CACHE/ocp/mrc_ctl_check"
  if [ -n "${MRC_LAB_EXTRA:-}" ]; then cp -a "$MRC_LAB_EXTRA" "$o/lab/extra"; fi
  if [ -n "$USER_SCRIPT" ]; then cp "$USER_SCRIPT" "$o/lab/user.sh"; fi
  if [ -n "$USER_SCRIPT_A" ]; then cp "$USER_SCRIPT_A" "$o/lab/user-a.sh"; cp "$USER_SCRIPT_B" "$o/lab/user-b.sh"; fi
  # Host libraries the rootfs does not have (same Debian release: normally none).
  local lib
  [ -f "$BASE.list" ] || cpio -it --quiet <"$BASE" >"$BASE.list"
  for lib in $(ldd "$PERF_BIN" $TEST_BINS $SIM_BIN "$MRC_SO" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do
    # (The host may have merged /usr and the rootfs not: look for the name in any lib dir.)
    if ! grep -qE "^(usr/)?lib(64)?/(x86_64-linux-gnu/)?$(basename "$lib" | sed 's/[.+]/\\&/g')\$" "$BASE.list"; then
      mkdir -p "$o$(dirname "$lib")"
      cp -L "$lib" "$o$lib"
      say "carrying host library $lib"
    fi
  done
  (cd "$o" && find . -print0 | cpio --null -o -H newc --owner 0:0 --quiet) >"$WORK/overlay.cpio"
  cat "$BASE" "$WORK/overlay.cpio" >"$WORK/initrd"
}

# --- the VMs ----------------------------------------------------------------------------
# start_vm NAME ROLE SMP MEM_MB [qemu args...]: boots in the background; results of the
# guest's checks arrive on its second serial port, $WORK/NAME.results.
start_vm() {
  local name=$1 role=$2 smp=$3 mem=$4
  shift 4
  : >"$WORK/$name.results"
  qemu-system-x86_64 -accel tcg -cpu max -smp "$smp" -m "$mem" -M pc \
    -nodefaults -no-user-config -display none -no-reboot \
    -kernel "$KDIR/vmlinux" -initrd "$WORK/initrd" \
    -append "console=ttyS0 quiet panic=-1 mrclab.role=$role" \
    -serial "file:$WORK/$name.console" -serial "file:$WORK/$name.results" \
    "$@" >"$WORK/$name.qemu.log" 2>&1 &
  QEMU_PIDS+=($!)
  eval "PID_$name=$!"
}

# wait_vms NAME...: waits for each VM to power off, at most VM_TIMEOUT seconds from now;
# a VM still running then is killed and recorded as a failed check.
wait_vms() {
  local deadline=$(( $(date +%s) + VM_TIMEOUT )) name pid
  for name in "$@"; do
    pid=$(eval echo "\$PID_$name")
    while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null || true
      jq -nc --arg c "$name-vm" --arg d "the VM ran past ${VM_TIMEOUT}s and was killed (console: $WORK/$name.console)" \
        '{check:$c, ok:false, detail:$d}' >>"$WORK/$name.results"
    else
      wait "$pid" 2>/dev/null || true
    fi
  done
}

# collect NAME ROLE: the VM's result lines into results.jsonl; a VM whose guest script did
# not finish (no `ROLE-complete` line) fails with the tail of its console.
collect() {
  local name=$1 roles=$2 role
  tr -d '\r' <"$WORK/$name.results" | grep '^{' | jq -c --arg vm "$name" '. + {vm: $vm}' >>"$RESULTS" 2>/dev/null || true
  for role in ${roles//,/ }; do
    if ! grep -q "\"check\":\"$role-complete\"" "$WORK/$name.results"; then
      jq -nc --arg c "$role-complete" --arg vm "$name" \
        --arg d "the guest did not finish its $role checks; console tail: $(tail -5 "$WORK/$name.console" | tr -d '\r' | tr '\n' '|')" \
        '{check:$c, ok:false, detail:$d, vm:$vm}' >>"$RESULTS"
    fi
  done
}

# One VM runs every single-VM part (ROLES: comma-separated), one after the other.
run_single() {
  local roles=$1 r
  start_vm single "$roles" "$SMP" 1536 -nic none
  wait_vms single
  collect single "$roles"
}

# Two VMs, one virtio NIC each, joined by qemu's socket netdev (a TCP connection on
# 127.0.0.1: nothing else is reachable). filter-dump writes what VM b's NIC sends and
# receives to a pcap on the host. ROLE_A, ROLE_B: the guests' roles [host-a host-b]; the
# capture is checked for two-hosts' own roles only.
run_two_hosts() {
  local role_a=${1:-host-a} role_b=${2:-host-b} port
  port=$(( 20000 + RANDOM % 20000 ))
  start_vm hosta "$role_a" 1 1024 \
    -netdev "socket,id=n0,listen=127.0.0.1:$port" -device virtio-net-pci,netdev=n0,mac=52:54:00:6d:72:01
  # The listener must be up before the second VM connects.
  local i
  for i in $(seq 50); do
    ss -ltn 2>/dev/null | grep -q "127.0.0.1:$port " && break
    sleep 0.1
  done
  start_vm hostb "$role_b" 1 1024 \
    -netdev "socket,id=n0,connect=127.0.0.1:$port" -device virtio-net-pci,netdev=n0,mac=52:54:00:6d:72:02 \
    -object "filter-dump,id=f0,netdev=n0,file=$WORK/two-hosts.pcap"
  wait_vms hosta hostb
  collect hosta "$role_a"
  collect hostb "$role_b"
  if [ "$role_a" = host-a ]; then capture_check; fi
}

# Two VMs with two virtio NICs each, NIC n of one joined to NIC n of the other by its own
# socket netdev (one per plane: 10.0.0.0/24 and 10.1.0.0/24), rxe0 and rxe1 on each: the
# verbs datapath on both devices, one NIC set down mid-run (rxe-guest.sh role_planes_b).
# ROLE_A, ROLE_B: the guests' roles [planes-a planes-b].
run_two_planes() {
  local role_a=${1:-planes-a} role_b=${2:-planes-b} p0 p1 i
  p0=$(( 20000 + RANDOM % 20000 ))
  p1=$(( p0 + 1 ))
  start_vm planea "$role_a" 1 1024 \
    -netdev "socket,id=n0,listen=127.0.0.1:$p0" -device virtio-net-pci,netdev=n0,mac=52:54:00:6d:73:01 \
    -netdev "socket,id=n1,listen=127.0.0.1:$p1" -device virtio-net-pci,netdev=n1,mac=52:54:00:6d:73:11
  for i in $(seq 50); do
    ss -ltn 2>/dev/null | grep -q "127.0.0.1:$p1 " && break
    sleep 0.1
  done
  start_vm planeb "$role_b" 1 1024 \
    -netdev "socket,id=n0,connect=127.0.0.1:$p0" -device virtio-net-pci,netdev=n0,mac=52:54:00:6d:73:02 \
    -netdev "socket,id=n1,connect=127.0.0.1:$p1" -device virtio-net-pci,netdev=n1,mac=52:54:00:6d:73:12
  wait_vms planea planeb
  collect planea "$role_a"
  collect planeb "$role_b"
}

# The capture: every RoCE v2 packet (UDP 4791) from the client (10.0.0.2) to the server;
# one UDP source port per EV.
capture_check() {
  local pcap=$WORK/two-hosts.pcap evs ports nports pkts ok=false detail
  evs=$(jq -r 'select(.check == "two-hosts-client") | .evs // empty' "$RESULTS" | head -1)
  if [ ! -s "$pcap" ]; then
    detail="no capture at $pcap"
  else
    # The clean run is what precedes host-b's 1111-byte marker ping (the netem run follows).
    local marker before
    marker=$(tshark -r "$pcap" -Y 'icmp.type == 8 && ip.len == 1139' -T fields -e frame.number 2>/dev/null | head -1)
    before="frame.number < ${marker:-999999999}"
    ports=$(tshark -r "$pcap" -Y "$before && udp.dstport == 4791 && ip.src == 10.0.0.2 && ip.dst == 10.0.0.1" \
      -T fields -e udp.srcport 2>/dev/null | sort -n | uniq -c | awk '{printf "%s:%s ", $2, $1}')
    pkts=$(tshark -r "$pcap" -Y "$before && udp.dstport == 4791" 2>/dev/null | wc -l)
    nports=$(printf '%s' "$ports" | wc -w)
    [ -n "$marker" ] || ports="(no marker ping found: the whole capture) $ports"
    detail="$pkts RoCE v2 packets; client->server source ports (port:packets): $ports"
    if [ -z "$evs" ]; then
      detail="the client reported no EV count (its check failed?); $detail"
    elif [ "$nports" = "$evs" ]; then
      ok=true
      detail="$nports distinct UDP source ports = $evs EVs; $detail"
    else
      detail="$nports distinct UDP source ports, expected ${evs:-?} (one per EV); $detail"
    fi
  fi
  jq -nc --arg d "$detail" --argjson ok "$ok" --argjson n "${nports:-0}" --arg evs "${evs:-}" \
    '{check:"two-hosts-capture", ok:$ok, detail:$d, distinct_source_ports:$n, evs:($evs|tonumber? // null), vm:"host"}' >>"$RESULTS"
}

# The perftest part's numbers side by side: MB/s (2^20 bytes), packets/s and the time per
# packet they imply (one packet per 4096-byte datagram: 16 per 64 KiB RC WRITE, one per
# 4096-byte UD SEND, ceil(size / 4040) per mrc message), and latencies.
perftest_table() {
  jq -rs '
    def row($c): map(select(.check == $c))[0];
    def bw($c; $bytes; $pkts_per_msg): row($c) as $r | if $r == null or ($r.mib_per_s == null) or $r.mib_per_s <= 0 then empty else
      ($r.mib_per_s * 1048576 / $bytes * $pkts_per_msg) as $pps |
      "\($c)\t\($bytes)\t\($r.mib_per_s * 100 | round / 100)\t\($pps | round)\t\(1e6 / $pps * 10 | round / 10)" end;
    def lat($c; $f): row($c) as $r | if $r == null then empty else "\($c)\t8\t-\t-\tlatency \($r[$f] * 10 | round / 10) us" end;
    "check\tbytes\tMB/s\tpackets/s\tus/packet",
    bw("perftest-ib_write_bw"; 65536; 16),
    bw("perftest-mrc-bw"; 65536; 17),
    bw("perftest-mrc-udp-bw"; 65536; 17),
    bw("perftest-ib_send_bw-ud"; 4096; 1),
    bw("perftest-mrc-bw-4k"; 4040; 1),
    bw("perftest-ib_send_bw-ud-2"; 4096; 1),
    bw("perftest-mrc-bw-4k-plain"; 4040; 1),
    lat("perftest-ib_write_lat"; "t_typical_us"),
    lat("perftest-mrc-lat"; "lat_typical_us"),
    lat("perftest-mrc-udp-lat"; "lat_typical_us")' "$RESULTS" | column -t -s $'\t'
}

# The rounds of rxe-guest.sh's perftest_mrc_caller side by side: MB/s of ib_send_bw -c UD,
# of mrc --cc none with an engine thread per end and with caller progress, the cost ratios
# perftest / mrc of each round (above 1: mrc's datagram costs more), their medians, and the
# latency with caller progress.
perftest_caller_table() {
  jq -rs '
    def mib($c): map(select(.check == $c and .ok == true))[0].mib_per_s // null;
    def cpu($c): map(select(.check == $c and .ok == true))[0].cpu_s // null;
    def r2: if . == null then "-" else . * 100 | round / 100 end;
    def ratio($a; $b): if $a == null or $b == null or $b <= 0 then null else $a / $b end;
    def median: map(select(. != null)) | sort | if length == 0 then null else .[length / 2 | floor] end;
    . as $all |
    [range(1; 4) | tostring as $r | $all |
      {r: $r, ud: mib("perftest-ib_send_bw-ud-r\($r)"),
       thread: mib("perftest-mrc-bw-4k-plain-thread-r\($r)"),
       caller: mib("perftest-mrc-bw-4k-plain-caller-r\($r)"),
       thread_cpu: cpu("perftest-mrc-bw-4k-plain-thread-r\($r)"),
       caller_cpu: cpu("perftest-mrc-bw-4k-plain-caller-r\($r)")}
      | .ratio_thread = ratio(.ud; .thread) | .ratio_caller = ratio(.ud; .caller)] as $rows |
    "round\tib_send_bw-UD MB/s\tmrc-thread MB/s\tmrc-caller MB/s\tratio UD/thread\tratio UD/caller\tCPU s thread\tCPU s caller",
    ($rows[] | "\(.r)\t\(.ud | r2)\t\(.thread | r2)\t\(.caller | r2)\t\(.ratio_thread | r2)\t\(.ratio_caller | r2)\t\(.thread_cpu | r2)\t\(.caller_cpu | r2)"),
    "median\t\([$rows[].ud] | median | r2)\t\([$rows[].thread] | median | r2)\t\([$rows[].caller] | median | r2)\t\([$rows[].ratio_thread] | median | r2)\t\([$rows[].ratio_caller] | median | r2)\t-\t-",
    (map(select(.check == "perftest-mrc-lat-caller" and .ok == true))[0].lat_typical_us // null
      | "lat-caller\t\(. | r2) us typical (perftest-mrc-lat-caller)")' "$RESULTS" | column -t -s $'\t'
}

report() {
  local pass fail
  while IFS= read -r line; do
    if [ "$(jq -r .ok <<<"$line")" = true ]; then
      printf 'PASS %s: %s\n' "$(jq -r .check <<<"$line")" "$(jq -r .detail <<<"$line")"
    else
      printf 'FAIL %s: %s\n' "$(jq -r .check <<<"$line")" "$(jq -r .detail <<<"$line")"
    fi
  done <"$RESULTS"
  pass=$(jq -s 'map(select(.ok == true)) | length' "$RESULTS")
  fail=$(jq -s 'map(select(.ok != true)) | length' "$RESULTS")
  jq -nc --argjson p "$pass" --argjson f "$fail" --arg parts "$PARTS" --arg k "$KPKG" \
    --argjson prep "$PREP_MS" --argjson run "$RUN_MS" \
    '{summary:true, passed:$p, failed:$f, parts:$parts, kernel:$k, prepare_ms:$prep, run_ms:$run}' >>"$RESULTS"
  printf 'rxe-lab: %s passed, %s failed (parts: %s; kernel %s; prepare %ss, run %ss); results: %s\n' \
    "$pass" "$fail" "$PARTS" "$KPKG" "$((PREP_MS / 1000))" "$((RUN_MS / 1000))" "$RESULTS"
  [ "$fail" = 0 ] && [ "$pass" -gt 0 ]
}

# The command line into PARTS_LIST (the parts, in order), USER_SCRIPT (script FILE) and
# USER_SCRIPT_A/_B (two-hosts-script FILE_A FILE_B); dies (exit 2) on anything else, before
# any tool is looked for or anything is built: `script` and `two-hosts-script` come alone,
# with exactly their readable files (elsewhere in a list of parts they would boot the VMs
# and only then find no script; extra words after them were silently dropped).
parse_args() {
  PARTS_LIST=()
  USER_SCRIPT="" USER_SCRIPT_A="" USER_SCRIPT_B=""
  local f
  case ${1:-} in
    script)
      [ $# -eq 2 ] || die "script FILE: exactly one FILE and no other part (got $(( $# - 1 )) words after script)"
      [ -f "$2" ] && [ -r "$2" ] || die "script FILE: no readable file $2"
      USER_SCRIPT=$2
      PARTS_LIST=(script)
      return
      ;;
    two-hosts-script|two-planes-script)
      [ $# -eq 3 ] || die "$1 FILE_A FILE_B: exactly two files and no other part (got $(( $# - 1 )) words after $1)"
      for f in "$2" "$3"; do
        [ -f "$f" ] && [ -r "$f" ] || die "$1 FILE_A FILE_B: no readable file $f"
      done
      USER_SCRIPT_A=$2 USER_SCRIPT_B=$3
      PARTS_LIST=("$1")
      return
      ;;
  esac
  if [ $# -eq 0 ]; then PARTS_LIST=(single netem soak two-hosts two-planes); else PARTS_LIST=("$@"); fi
  local p
  for p in "${PARTS_LIST[@]}"; do
    case $p in
      single|two-hosts|two-planes|perftest|netem|prepare|soak|srv6) ;;
      script|two-hosts-script|two-planes-script) die "$p takes its file(s) and comes alone: testbed/rxe-lab.sh script FILE, two-hosts-script FILE_A FILE_B or two-planes-script FILE_A FILE_B" ;;
      *) die "unknown part $p (single, netem, two-hosts, two-planes, perftest, soak, srv6, prepare, script FILE, two-hosts-script FILE_A FILE_B, two-planes-script FILE_A FILE_B)" ;;
    esac
  done
}

main() {
  parse_args "$@"
  need_tools
  mkdir -p "$CACHE"
  local parts=("${PARTS_LIST[@]}")
  PARTS="${parts[*]}"
  # The srv6 part also runs examples/tests/mpi.rs's testbed test (one rank per testbed
  # host, under mpirun): Open MPI in the guest (a base of its own: the key has the list).
  if [[ " $PARTS " == *" srv6 "* ]]; then GUEST_PKGS="$GUEST_PKGS,openmpi-bin,coreutils"; fi
  local t0; t0=$(now_ms)
  prepare_kernel
  prepare_rootfs
  PREP_MS=$(( $(now_ms) - t0 ))
  say "kernel $KPKG, rootfs $(basename "$BASE"): prepared in ${PREP_MS}ms"
  [ "$PARTS" = prepare ] && exit 0
  build_binaries
  t0=$(now_ms)
  WORK=$(mktemp -d "$CACHE/run.XXXXXX")
  RESULTS=$CACHE/results.jsonl
  : >"$RESULTS"
  make_initrd
  local roles=""
  for p in "${parts[@]}"; do
    case $p in single|perftest|netem|script|soak) roles="${roles:+$roles,}$p" ;; esac
  done
  if [ -n "$roles" ]; then
    say "running $roles in one VM ($SMP vCPUs)"
    run_single "$roles"
  fi
  for p in "${parts[@]}"; do
    if [ "$p" = srv6 ]; then
      say "running srv6 in a VM of its own ($SMP vCPUs)"
      start_vm srv6 srv6 "$SMP" 1536 -nic none
      VM_TIMEOUT=$SRV6_TIMEOUT wait_vms srv6
      collect srv6 srv6
    fi
    if [ "$p" = two-hosts ]; then
      say "running two-hosts (two VMs, 1 vCPU each)"
      run_two_hosts
    fi
    if [ "$p" = two-planes ]; then
      say "running two-planes (two VMs with two NICs each, 1 vCPU each)"
      run_two_planes
    fi
    if [ "$p" = two-hosts-script ]; then
      say "running two-hosts-script (two VMs, 1 vCPU each)"
      run_two_hosts host-a-script host-b-script
    fi
    if [ "$p" = two-planes-script ]; then
      say "running two-planes-script (two VMs with two NICs each, 1 vCPU each)"
      run_two_planes planes-a-script planes-b-script
    fi
  done
  RUN_MS=$(( $(now_ms) - t0 ))
  # The run's initramfs and its overlay (the stripped binaries: 150-300 MB a run) are
  # not needed once the VMs are off; the consoles, captures and results stay in $WORK.
  rm -rf "$WORK/initrd" "$WORK/overlay.cpio" "$WORK/overlay"
  if [[ " $PARTS " == *" perftest "* ]]; then
    perftest_table | tee "$CACHE/perftest.txt" || say "could not tabulate the perftest numbers"
    perftest_caller_table | tee "$CACHE/perftest-caller.txt" || say "could not tabulate the caller rounds"
  fi
  if [ -n "$USER_SCRIPT" ]; then tr -d '\r' <"$WORK/single.console" | grep -v '^\[ *[0-9.]*\] ' >&2; fi
  if [ -n "$USER_SCRIPT_A" ]; then
    local vm vms="hosta hostb"
    [ "$PARTS" = two-planes-script ] && vms="planea planeb"
    for vm in $vms; do tr -d '\r' <"$WORK/$vm.console" | grep -v '^\[ *[0-9.]*\] ' | sed "s/^/[$vm] /" >&2; done
  fi
  report
}

main "$@"
