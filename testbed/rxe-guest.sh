#!/bin/sh
# rxe-guest.sh: the checks testbed/rxe-lab.sh runs inside its VMs (busybox sh; the guest
# init runs `sh /lab/guest.sh ROLES` with stdout on the second serial port). ROLES is a
# comma-separated list of: single, perftest, netem, host-a, host-b, script, soak, srv6,
# host-a-script, host-b-script, planes-a, planes-b, planes-a-script, planes-b-script.
#
# Every check prints one JSON line {"check", "ok", "detail", ...}; each role ends with
# `ROLE-complete`, so the host can tell a guest that died half-way from one that passed.
# Logs (command outputs) go to stderr, the console.
set -u
PERF=/lab/bin/mrc-perf
TESTS=/lab/tests
DEV=rxe0
W=/tmp/w
mkdir -p $W
# The test binaries run mrc-perf from the host's build path (CARGO_BIN_EXE_mrc-perf).
if [ -f /lab/perf_bin_path ]; then
  p=$(cat /lab/perf_bin_path)
  mkdir -p "$(dirname "$p")" && ln -sf $PERF "$p"
fi
# Other paths compiled into the test binaries (/lab/links: `LINK TARGET` lines; a line
# with a LINK alone is a directory to make).
if [ -f /lab/links ]; then
  while read -r link target; do
    if [ -z "$link" ]; then continue; fi
    if [ -z "$target" ]; then mkdir -p "$link"; continue; fi
    mkdir -p "$(dirname "$link")" && ln -sfn "$target" "$link"
  done </lab/links
fi
NCHECKS=0
# Debian's static busybox runs its own applets before anything on PATH (tc, ip, modprobe
# are applets too): the real tools by their paths.
TC=/sbin/tc
IP=/bin/ip
MODPROBE=/sbin/modprobe

log() { echo "rxe-guest: $*" >&2; }

# emit NAME OK DETAIL [EXTRA-JSON-OBJECT]
# (-M: ttyS1 is a terminal, and jq would colour its output.) `t_s`: the guest's uptime.
emit() {
  NCHECKS=$((NCHECKS + 1))
  up=$(cut -d' ' -f1 /proc/uptime)
  jq -ncM --arg c "$1" --argjson ok "$2" --arg d "$3" --argjson x "${4:-null}" --argjson t "$up" \
    '{check: $c, ok: $ok, detail: $d, t_s: $t} + ($x // {})'
  if [ "$2" = true ]; then log "[$up s] PASS $1: $3"; else log "[$up s] FAIL $1: $3"; fi
}

# Adds rxe0 on NETDEV; prints the index of the GID holding IPv4 address ADDR.
rxe_up() {
  netdev=$1 addr=$2
  $MODPROBE crc32_generic && $MODPROBE -a rdma_rxe ib_uverbs || return 1
  rdma link add $DEV type rxe netdev "$netdev" >&2 || return 1
  want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' $(echo "$addr" | tr . ' '))
  i=0
  while [ $i -lt 20 ]; do
    # The addresses come first; the rest of the 1024 entries are empty.
    for g in 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
      if [ "$(cat /sys/class/infiniband/$DEV/ports/1/gids/$g)" = "$want" ]; then
        # and the port ACTIVE (it can follow the GID by a while on a loaded host: a client
        # started at once was refused with "port 1 of rxe1 is not active (state 1)")
        j=0
        until grep -q ACTIVE /sys/class/infiniband/$DEV/ports/1/state 2>/dev/null || [ $j -ge 100 ]; do
          sleep 0.1
          j=$((j + 1))
        done
        grep -q ACTIVE /sys/class/infiniband/$DEV/ports/1/state || return 1
        echo $g
        return 0
      fi
    done
    sleep 0.2
    i=$((i + 1))
  done
  return 1
}

port_fact() { # FIELD: from ibv_devinfo (state, active_mtu, gid_tbl_len)
  ibv_devinfo -v -d $DEV | awk -v f="$1:" '$1 == f {print $2; exit}'
}

# perf_bw NAME ITERS SIZE ARGS...: mrc-perf with --json --verify; asserts exact bytes,
# messages and 0 bad bytes at the receiver.
perf_bw() {
  name=$1 n=$2 size=$3
  shift 3
  bytes=$((n * size))
  tries=0
  while :; do
    $PERF "$@" -s "$size" -n "$n" --verify --json >$W/$name.json 2>$W/$name.err
    rc=$?
    # RETRY_REFUSED=N: the server is in another VM that may still be booting.
    if [ $rc -ne 0 ] && [ $tries -lt "${RETRY_REFUSED:-0}" ] && grep -q 'cannot reach server' $W/$name.json $W/$name.err; then
      tries=$((tries + 1))
      sleep 0.5
      continue
    fi
    break
  done
  cat $W/$name.err >&2
  if [ $rc -ne 0 ]; then
    emit "$name" false "mrc-perf $* exited $rc: $(head -c 300 $W/$name.err; jq -r '.error // empty' $W/$name.json 2>/dev/null)"
    return
  fi
  if jq -e --argjson n "$n" --argjson b "$bytes" '.ok and .iterations == $n and .total_bytes == $b
      and .receiver.verified_bytes == $b and .receiver.verified_messages == $n
      and .receiver.completions == $n and .receiver.bad_bytes == 0' $W/$name.json >/dev/null; then
    emit "$name" true "$(jq -r '"\(.receiver.verified_messages) x \(.msg_size_bytes) B: \(.receiver.verified_bytes) bytes verified, \(.receiver.bad_bytes) bad bytes, \(.sent_packets) packets (\(.retransmitted_packets) retransmitted), \(.bw_avg_mib_per_s * 100 | round / 100) MB/s"' $W/$name.json)" \
      "$(jq -c '{verified_bytes: .receiver.verified_bytes, bad_bytes: .receiver.bad_bytes, messages: .receiver.verified_messages, sent_packets, retransmitted_packets, duplicate_datagrams: .receiver.duplicate_datagrams, mib_per_s: .bw_avg_mib_per_s, elapsed_s, evs: (.evs | length), src_ports: [.evs[].src_port]}' $W/$name.json)"
  else
    emit "$name" false "expected $n messages, $bytes bytes verified, 0 bad: $(jq -c '{ok, iterations, total_bytes, receiver, error}' $W/$name.json 2>&1 | head -c 600)"
  fi
}

# perf_lat NAME ITERS ARGS...: --test lat --verify; both directions' 8-byte messages are
# verified (2 x ITERS messages, 16 x ITERS bytes).
perf_lat() {
  name=$1 n=$2
  shift 2
  $PERF "$@" --test lat -n "$n" --verify --json >$W/$name.json 2>$W/$name.err
  rc=$?
  cat $W/$name.err >&2
  if [ $rc -ne 0 ]; then
    emit "$name" false "mrc-perf $* --test lat exited $rc: $(head -c 300 $W/$name.err)"
    return
  fi
  if jq -e --argjson n "$n" '.ok and .iterations == $n and .receiver.verified_messages == 2 * $n
      and .receiver.verified_bytes == 16 * $n and .receiver.bad_bytes == 0 and .lat_us.typical > 0' \
      $W/$name.json >/dev/null; then
    emit "$name" true "$(jq -r '"\(.iterations) round trips, \(.receiver.verified_messages) messages (\(.receiver.verified_bytes) bytes) verified, 0 bad; latency typical \(.lat_us.typical * 10 | round / 10) us, p99 \(.lat_us.p99 * 10 | round / 10) us"' $W/$name.json)" \
      "$(jq -c '{verified_bytes: .receiver.verified_bytes, bad_bytes: .receiver.bad_bytes, messages: .receiver.verified_messages, lat_typical_us: .lat_us.typical, lat_p99_us: .lat_us.p99}' $W/$name.json)"
  else
    emit "$name" false "expected $n round trips, $((2 * n)) messages verified: $(jq -c '{ok, iterations, receiver, lat_us, error}' $W/$name.json | head -c 600)"
  fi
}

# server_client NAME ITERS SIZE|lat SERVER-ARGS -- CLIENT-ARGS: mrc-perf server in the
# background, the client with --verify; the server's own report must show the same.
server_client() {
  name=$1 n=$2 what=$3
  shift 3
  sargs=""
  while [ "$1" != -- ]; do sargs="$sargs $1"; shift; done
  shift
  # shellcheck disable=SC2086
  $PERF server $sargs >$W/$name.server.out 2>$W/$name.server.err &
  spid=$!
  i=0
  while ! grep -q 'waiting for a client' $W/$name.server.err 2>/dev/null && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
  done
  if [ "$what" = lat ]; then
    perf_lat "$name" "$n" client "$@"
    # The server verifies the pings it receives.
    vmsgs=$n
    vbytes=$((8 * n))
  else
    perf_bw "$name" "$n" "$what" client "$@"
    vmsgs=$n
    vbytes=$((n * what))
  fi
  # Bounded: a client that failed before connecting leaves the server waiting for good.
  i=0
  while kill -0 $spid 2>/dev/null && [ $i -lt 300 ]; do
    sleep 0.1
    i=$((i + 1))
  done
  if kill -0 $spid 2>/dev/null; then
    kill $spid
    echo "rxe-guest: the server still ran 30 s after its client ended: killed" >>$W/$name.server.err
  fi
  wait $spid
  src=$?
  cat $W/$name.server.out $W/$name.server.err >&2
  want="verify: $vmsgs messages, $vbytes bytes checked, 0 bad bytes"
  if [ $src -eq 0 ] && grep -qxF " $want" $W/$name.server.out; then
    emit "$name-server" true "server exited 0 and reported \"$want\""
  else
    emit "$name-server" false "server exit $src; wanted \"$want\" in: $(tr '\n' '|' <$W/$name.server.out | head -c 500) $(head -c 300 $W/$name.server.err)"
  fi
}

# expect_err NAME CODE REGEX ARGS...: mrc-perf ARGS must exit CODE with ERR_LINES (default
# 1) lines on stderr, the last matching REGEX exactly (grep -xE).
expect_err() {
  name=$1 code=$2 re=$3
  shift 3
  timeout 60 $PERF "$@" >$W/$name.out 2>$W/$name.err
  rc=$?
  cat $W/$name.err >&2
  lines=$(wc -l <$W/$name.err)
  if [ $rc -eq "$code" ] && [ "$lines" -eq "${ERR_LINES:-1}" ] && tail -1 $W/$name.err | grep -qxE "$re"; then
    emit "$name" true "exit $rc, stderr: $(tail -1 $W/$name.err)"
  else
    emit "$name" false "wanted exit $code and ${ERR_LINES:-1} stderr lines, the last matching /$re/; got exit $rc, $lines lines: $(head -c 500 $W/$name.err)"
  fi
}

# cargo_test NAME BINARY: every test of a cargo test binary ran (none skipped, none
# ignored) and passed.
cargo_test() {
  name=$1 bin=$TESTS/$2
  want=$($bin --list 2>/dev/null | grep -c ': test$')
  MRC_VERBS_REQUIRE=1 MRC_VERBS_DEVICE=$DEV $bin --test-threads=1 >$W/$name.out 2>&1
  rc=$?
  cat $W/$name.out >&2
  line=$(grep '^test result:' $W/$name.out | tail -1)
  if [ $rc -eq 0 ] && [ "$want" -gt 0 ] \
      && echo "$line" | grep -q "^test result: ok\. $want passed; 0 failed; 0 ignored;"; then
    emit "$name" true "$2: $want of $want tests passed against $DEV ($line)" "{\"tests\": $want}"
  else
    emit "$name" false "$2: exit $rc, wanted $want passed: ${line:-no result line}; $(grep -E 'panicked|FAILED' $W/$name.out | head -5 | tr '\n' '|')"
  fi
}

# cargo_test_filtered NAME BIN FILTER: the tests of /lab/tests/BIN whose names contain
# FILTER (one at a time); every one must pass, and at least one must match.
cargo_test_filtered() {
  name=$1 bin=$TESTS/$2 filter=$3
  want=$($bin --list 2>/dev/null | grep ': test$' | grep -c -F "$filter")
  $bin "$filter" --test-threads=1 >$W/$name.out 2>&1
  rc=$?
  cat $W/$name.out >&2
  line=$(grep '^test result:' $W/$name.out | tail -1)
  if [ $rc -eq 0 ] && [ "$want" -gt 0 ] && ! grep -q '^SKIPPED' $W/$name.out \
      && echo "$line" | grep -q "^test result: ok\. $want passed; 0 failed; 0 ignored;"; then
    emit "$name" true "$2 $filter: $want of $want tests passed ($line)" "{\"tests\": $want}"
  else
    emit "$name" false "$2 $filter: exit $rc, wanted $want passed: ${line:-no result line}; $(grep -E 'panicked|FAILED|SKIPPED' $W/$name.out | head -5 | tr '\n' '|')"
  fi
}

# ocp_check NAME PORT: fabric/ocp-mrc/c/mrc_check (every mrc.h call of lib_mrc.so) as
# server and client, two processes on rxe0; both must pass every check and print their
# exact summaries.
ocp_check() {
  name=$1 port=$2
  timeout 120 /lab/bin/mrc_check server -d $DEV -x 1 -p "$port" >$W/$name.server.out 2>$W/$name.server.err &
  spid=$!
  i=0
  while ! grep -q 'listening' $W/$name.server.err 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  timeout 120 /lab/bin/mrc_check client 127.0.0.1 -d $DEV -x 1 -p "$port" >$W/$name.client.out 2>$W/$name.client.err
  crc=$?
  wait $spid
  src=$?
  cat $W/$name.server.out $W/$name.server.err $W/$name.client.out $W/$name.client.err >&2
  ws="mrc_check server: 4 immediates in order, 1052672 bytes verified (302702 written), 0 bad; 4 COMM_EST + 3 QP_ACCESS_ERR events"
  wc="mrc_check client: 7 messages + 3 forbidden (each REM_ACCESS_ERR, ERR, reset) + 1 last WRITE, 17 send completions, 4 COMM_EST, reply of 3000 bytes verified"
  if [ $src -eq 0 ] && [ $crc -eq 0 ] && grep -qxF "$ws" $W/$name.server.out && grep -qxF "$wc" $W/$name.client.out \
      && grep -qxF "mrc_check server: all checks passed" $W/$name.server.out \
      && grep -qxF "mrc_check client: all checks passed" $W/$name.client.out; then
    emit "$name" true "lib_mrc.so, two processes on $DEV: $ws; $wc"
  else
    emit "$name" false "server exit $src, client exit $crc: $(grep -h FAIL $W/$name.server.err $W/$name.client.err | head -5 | tr '\n' '|') $(tail -c 300 $W/$name.server.err) $(tail -c 300 $W/$name.client.err)"
  fi
}

# ocp_ctl_check NAME: fabric/ocp-mrc/c/mrc_ctl_check (every mrc_ctl.h call of lib_mrc.so)
# on rxe0: every check must pass, on the device (not the stand-in context), and its live
# QP pair (EXP EV profile, NSCC CC profile, a DENY and GOOD) must print its exact summary,
# in the controller's process and in another process (profiles from the device's store).
ocp_ctl_check() {
  name=$1
  timeout 60 /lab/bin/mrc_ctl_check >$W/$name.out 2>$W/$name.err
  rc=$?
  live="mrc_ctl_check: live QP pair on EXP EV profile 4 (4 UDP EVs) and NSCC profile 3: 24 WRITEs of 16384 bytes verified, 40 data packets per phase on exactly those EVs, a denied EV out of rotation and back"
  cross="mrc_ctl_check: QP pair in another process than the controller on EXP EV profile 4 (4 UDP EVs) and NSCC profile 3: 24 WRITEs of 16384 bytes verified, 40 data packets per phase on exactly those EVs, a denied EV out of rotation and back"
  if [ $rc -eq 0 ] && grep -qxF "mrc_ctl_check: on a device" $W/$name.out \
      && grep -qxF "$live" $W/$name.out \
      && grep -qxF "$cross" $W/$name.out \
      && [ "$(tail -1 $W/$name.out)" = "mrc_ctl_check: ok" ]; then
    emit "$name" true "lib_mrc.so's controller API on $DEV: every mrc_ctl.h call checked; $live; $(grep -F 'live EVs' $W/$name.out | head -1); $cross; $(grep -F 'live EVs' $W/$name.out | sed -n 2p)"
  else
    emit "$name" false "exit $rc: $(grep -v '^layout' $W/$name.out | tr '\n' '|') $(head -c 300 $W/$name.err)"
  fi
}

role_single() {
  gid=$(rxe_up lo 127.0.0.1)
  state=$(port_fact state) mtu=$(port_fact active_mtu) tbl=$(port_fact gid_tbl_len)
  gtype=$(cat /sys/class/infiniband/$DEV/ports/1/gid_attrs/types/"${gid:-1}" 2>/dev/null)
  if [ "$gid" = 1 ] && [ "$state" = PORT_ACTIVE ] && [ "$mtu" = 4096 ] && [ "$gtype" = "RoCE v2" ]; then
    emit single-setup true "rxe0 on lo: $state, active_mtu $mtu, GID 1 = ::ffff:127.0.0.1 ($gtype), gid_tbl_len $tbl"
  else
    emit single-setup false "rxe0 on lo: state ${state:-?}, active_mtu ${mtu:-?}, IPv4 GID index ${gid:-none}, type ${gtype:-?}"
    return
  fi
  ocp_check ocp-mrc-check 18640
  ocp_ctl_check ocp-mrc-ctl-check
  V="--fabric verbs -d $DEV -x 1"
  perf_bw verbs-loopback-bw 200 65536 loopback $V --mtu 4040
  perf_bw verbs-loopback-bw-mtu968 20 65536 loopback $V --mtu 968
  perf_lat verbs-loopback-lat 50 loopback $V --mtu 4040
  single_caller
  server_client verbs-client-server-bw 100 65536 $V --bind 127.0.0.1 -p 18604 -- \
    127.0.0.1 $V --mtu 4040 -p 18604
  server_client verbs-client-server-lat 50 lat $V --bind 127.0.0.1 -p 18605 -- \
    127.0.0.1 $V --mtu 4040 -p 18605
  # The table's banner names the datapath.
  $PERF loopback $V --mtu 4040 -n 4 >$W/banner.out 2>&1
  rc=$?
  b=$(grep -m1 'RDMA_Write BW Test' $W/banner.out | sed 's/^ *//')
  if [ $rc -eq 0 ] && [ "$b" = "RDMA_Write BW Test: mrc over RDMA UD verbs, loopback 127.0.0.1" ]; then
    emit verbs-banner true "exit 0, banner \"$b\""
  else
    emit verbs-banner false "exit $rc, banner \"$b\" (wanted \"RDMA_Write BW Test: mrc over RDMA UD verbs, loopback 127.0.0.1\")"
  fi
  # The error paths, each with its exact message and exit code 1.
  expect_err err-wrong-device 1 \
    'mrc-perf: error: --fabric verbs: RDMA device "mrc_no_such_dev9" not found among \["rxe0"\]' \
    loopback --fabric verbs -d mrc_no_such_dev9 -n 4
  # Checked when the device is opened, before any connection: every role says the same.
  gid_err="mrc-perf: error: --fabric verbs: GID index 200 of rxe0 port 1 is empty or past the table of $tbl"
  expect_err err-wrong-gid-index 1 "$gid_err" loopback --fabric verbs -d $DEV -x 200 -n 4
  expect_err err-wrong-gid-index-client 1 "$gid_err" client 127.0.0.1 --fabric verbs -d $DEV -x 200 -n 4 -p 18607
  expect_err err-wrong-gid-index-server 1 "$gid_err" server --fabric verbs -d $DEV -x 200 -p 18607
  expect_err err-mtu-above-port 1 \
    "mrc-perf: error: --fabric verbs: max_datagram_bytes 4152 exceeds the port's active MTU of 4096 bytes: pass --mtu 4040 or less \\(a UD datagram is at most the port MTU, and mrc adds up to 56 header bytes\\)" \
    loopback $V -n 4
  expect_err err-no-such-port 1 \
    "mrc-perf: error: --fabric verbs: ibv_query_port failed: Invalid argument \\(os error 22\\)" \
    loopback --fabric verbs -d $DEV --ib-port 2 --mtu 4040 -n 4
  # GID 0 on lo is the link-local fe80::200:ff:fe00:0, which lo has no route for: the
  # in-process server drops the client (one line), the client fails naming both GIDs.
  ERR_LINES=2
  expect_err err-unroutable-gid 1 \
    "mrc-perf: error: verbs address handle: ibv_create_ah failed: Network is unreachable \\(os error 101\\), from GID fe80::200:ff:fe00:0 to the peer's GID fe80::200:ff:fe00:0: is the GID index one whose address reaches the peer\\?" \
    loopback --fabric verbs -d $DEV -x 0 --mtu 4040 -n 4
  ERR_LINES=1
  cargo_test test-verbs_rxe verbs_rxe
  cargo_test test-verbs_no_device verbs_no_device
  cargo_test test-perf_verbs perf_verbs
}

# perftest_run NAME SERVER-AND-CLIENT-ARGS: perftest's server and client over rxe0 in this
# VM; prints the client's result row.
perftest_run() {
  name=$1
  shift
  "$@" >$W/$name.server 2>&1 &
  spid=$!
  sleep 1
  "$@" 127.0.0.1 >$W/$name.client 2>&1
  rc=$?
  wait $spid
  cat $W/$name.client >&2
  [ $rc -eq 0 ] || return 1
  awk '$1 ~ /^[0-9]+$/ && NF >= 5 {row=$0} END {print row}' $W/$name.client
}

# positive ROW FIELD: field FIELD of perftest's result row is a number above 0.
positive() {
  echo "$1" | awk -v f="$2" '{exit !($f + 0 > 0)}'
}

role_perftest() {
  [ -e /sys/class/infiniband/$DEV ] || rxe_up lo 127.0.0.1 >/dev/null
  X="-d $DEV -x 1 -F"
  # Same bytes everywhere: 200 x 64 KiB (RC WRITE, mrc) or 3200 x 4 KiB (UD SEND).
  # perftest's own figure must be a measurement: it prints 0.00 when its cycle counter
  # misjudges the run (seen once under TCG).
  if row=$(perftest_run ib_write_bw ib_write_bw $X -s 65536 -n 200 -p 18611) && positive "$row" 4; then
    emit perftest-ib_write_bw true "ib_write_bw $X -s 65536 -n 200: $row" \
      "$(echo "$row" | awk '{printf "{\"bytes\": %s, \"iters\": %s, \"mib_per_s\": %s}", $1, $2, $4}')"
  else
    emit perftest-ib_write_bw false "ib_write_bw failed or measured nothing: ${row:-} $(tail -3 $W/ib_write_bw.client | tr '\n' '|')"
  fi
  if row=$(perftest_run ib_send_bw_ud ib_send_bw -c UD $X -s 4096 -n 3200 -p 18612) && positive "$row" 4; then
    emit perftest-ib_send_bw-ud true "ib_send_bw -c UD $X -s 4096 -n 3200: $row" \
      "$(echo "$row" | awk '{printf "{\"bytes\": %s, \"iters\": %s, \"mib_per_s\": %s}", $1, $2, $4}')"
  else
    emit perftest-ib_send_bw-ud false "ib_send_bw -c UD failed or measured nothing: ${row:-} $(tail -3 $W/ib_send_bw_ud.client | tr '\n' '|')"
  fi
  if row=$(perftest_run ib_write_lat ib_write_lat $X -s 8 -n 1000 -p 18613) && positive "$row" 5; then
    emit perftest-ib_write_lat true "ib_write_lat $X -s 8 -n 1000: $row" \
      "$(echo "$row" | awk '{printf "{\"bytes\": %s, \"iters\": %s, \"t_typical_us\": %s}", $1, $2, $5}')"
  else
    emit perftest-ib_write_lat false "ib_write_lat failed or measured nothing: ${row:-} $(tail -3 $W/ib_write_lat.client | tr '\n' '|')"
  fi
  V="--fabric verbs -d $DEV -x 1"
  perf_bw perftest-mrc-bw 200 65536 loopback $V --mtu 4040
  # One mrc packet per UD datagram (4040 + 56 header bytes = 4096, ib_send_bw's size).
  perf_bw perftest-mrc-bw-4k 3200 4040 loopback $V --mtu 4040
  perf_lat perftest-mrc-lat 1000 loopback $V --mtu 4040
  # The same over the UDP datapath (io_uring sockets on lo), for reference.
  perf_bw perftest-mrc-udp-bw 200 65536 loopback --mtu 4040
  perf_lat perftest-mrc-udp-lat 1000 loopback --mtu 4040
  perftest_mrc_fair
  perftest_mrc_caller
}

# The verbs datapath progressed by the test threads themselves (--progress caller: a
# Worker over the verbs datapath, no engine thread, no channels): loopback bw and lat, and
# client/server bw (the client's choice holds for the server too), all --verify.
single_caller() {
  V="--fabric verbs -d $DEV -x 1 --progress caller"
  perf_bw verbs-loopback-bw-caller 100 65536 loopback $V --mtu 4040
  perf_lat verbs-loopback-lat-caller 50 loopback $V --mtu 4040
  server_client verbs-client-server-bw-caller 50 65536 $V --bind 127.0.0.1 -p 18633 -- \
    127.0.0.1 $V --mtu 4040 -p 18633
}

# perf_bw_plain NAME ITERS SIZE ARGS...: mrc-perf with --json and no --verify (as perftest
# runs: the payload is neither filled nor checked); asserts the messages and bytes sent and
# received, and records the datapath's counters: datagrams per post (tx_datagrams /
# tx_calls) and the ACKs that came back per data datagram (the sender's rx_datagrams /
# tx_datagrams), the process's CPU seconds.
perf_bw_plain() {
  name=$1 n=$2 size=$3
  shift 3
  bytes=$((n * size))
  $PERF "$@" -s "$size" -n "$n" --json >$W/$name.json 2>$W/$name.err
  rc=$?
  cat $W/$name.err >&2
  if [ $rc -ne 0 ]; then
    emit "$name" false "mrc-perf $* exited $rc: $(head -c 300 $W/$name.err)"
    return
  fi
  if jq -e --argjson n "$n" --argjson b "$bytes" '.ok and .iterations == $n and .total_bytes == $b
      and .receiver.completions == $n and .receiver.received_bytes == $b' $W/$name.json >/dev/null; then
    emit "$name" true "$(jq -r '"\(.iterations) x \(.msg_size_bytes) B (no --verify), \(.bw_avg_mib_per_s * 100 | round / 100) MB/s; \(.datapath.tx_datagrams) datagrams in \(.datapath.tx_calls) posts, \(.datapath.rx_datagrams) datagrams back (ACKs), \(.cpu_s * 100 | round / 100) CPU s"' $W/$name.json)" \
      "$(jq -c '{mib_per_s: .bw_avg_mib_per_s, elapsed_s, sent_packets, tx_datagrams: .datapath.tx_datagrams, tx_calls: .datapath.tx_calls, rx_datagrams: .datapath.rx_datagrams, engine_sleeps: .datapath.engine_sleeps, cpu_s}' $W/$name.json)"
  else
    emit "$name" false "expected $n messages, $bytes bytes at the receiver: $(jq -c '{ok, iterations, total_bytes, receiver, error}' $W/$name.json 2>&1 | head -c 600)"
  fi
}

# The comparison with ib_send_bw -c UD that is fair: one 4096-byte UD datagram per message,
# no payload checks and no congestion control on either side, run right after perftest's
# in the same VM.
perftest_mrc_fair() {
  V="--fabric verbs -d $DEV -x 1"
  if row=$(perftest_run ib_send_bw_ud2 ib_send_bw -c UD -d $DEV -x 1 -F -s 4096 -n 3200 -p 18641) && positive "$row" 4; then
    emit perftest-ib_send_bw-ud-2 true "ib_send_bw -c UD -d $DEV -x 1 -F -s 4096 -n 3200: $row" \
      "$(echo "$row" | awk '{printf "{\"bytes\": %s, \"iters\": %s, \"mib_per_s\": %s}", $1, $2, $4}')"
  else
    emit perftest-ib_send_bw-ud-2 false "ib_send_bw -c UD failed or measured nothing: ${row:-} $(tail -3 $W/ib_send_bw_ud2.client | tr '\n' '|')"
  fi
  # No congestion control, as perftest has none (NSCC's presets assume a 200 us round trip,
  # TCG's is about 2 ms).
  perf_bw_plain perftest-mrc-bw-4k-plain 3200 4040 loopback $V --mtu 4040 --cc none
}

# The fair pair again, three rounds in a row, each round ib_send_bw -c UD, then mrc with an
# engine thread per end (--progress thread), then mrc progressed by its test threads
# (--progress caller); and the latency test with caller progress. The host tabulates the
# medians and the ratios perftest / mrc (rxe-lab.sh's perftest_caller_table).
perftest_mrc_caller() {
  V="--fabric verbs -d $DEV -x 1"
  for r in 1 2 3; do
    if row=$(perftest_run ib_send_bw_ud_r$r ib_send_bw -c UD -d $DEV -x 1 -F -s 4096 -n 3200 -p 1865$r) && positive "$row" 4; then
      emit perftest-ib_send_bw-ud-r$r true "ib_send_bw -c UD -d $DEV -x 1 -F -s 4096 -n 3200: $row" \
        "$(echo "$row" | awk '{printf "{\"bytes\": %s, \"iters\": %s, \"mib_per_s\": %s}", $1, $2, $4}')"
    else
      emit perftest-ib_send_bw-ud-r$r false "ib_send_bw -c UD failed or measured nothing: ${row:-} $(tail -3 $W/ib_send_bw_ud_r$r.client | tr '\n' '|')"
    fi
    perf_bw_plain perftest-mrc-bw-4k-plain-thread-r$r 3200 4040 loopback $V --mtu 4040 --cc none --progress thread
    perf_bw_plain perftest-mrc-bw-4k-plain-caller-r$r 3200 4040 loopback $V --mtu 4040 --cc none --progress caller
  done
  perf_lat perftest-mrc-lat-caller 1000 loopback $V --mtu 4040 --progress caller
}

role_netem() {
  $MODPROBE sch_netem || { emit netem-setup false "modprobe sch_netem failed"; return; }
  # Loss, duplication and reordering (delay with jitter) on lo, for every packet of the
  # UDP datapath. (Not for rxe0 on lo: rxe hands a packet for its own MAC straight to its
  # receive path, past the qdisc.)
  spec="delay 1ms 1ms loss 2% duplicate 2%"
  if $TC qdisc add dev lo root netem $spec; then
    emit netem-setup true "tc qdisc add dev lo root netem $spec"
  else
    emit netem-setup false "tc qdisc add dev lo root netem $spec failed"
    return
  fi
  perf_bw netem-udp-loss-dup-bw 100 65536 loopback --mtu 4040
  perf_lat netem-udp-loss-dup-lat 20 loopback --mtu 4040
  $TC -s qdisc show dev lo >&2
  # Reordering: a quarter of the packets go at once, the rest 5 ms later.
  $TC qdisc change dev lo root netem delay 5ms reorder 25% 50%
  perf_bw netem-udp-reorder-bw 50 65536 loopback --mtu 4040
  $TC -s qdisc show dev lo >&2
  $TC qdisc del dev lo root
  # The faults did happen: retransmissions under loss, duplicates seen by the receiver.
  r=$(jq -r '"\(.retransmitted_packets) \(.receiver.duplicate_datagrams)"' $W/netem-udp-loss-dup-bw.json 2>/dev/null)
  set -- $r
  if [ "${1:-0}" -gt 0 ] && [ "${2:-0}" -gt 0 ]; then
    emit netem-faults-seen true "under loss 2% and duplicate 2%: $1 packets retransmitted, $2 duplicate datagrams dropped by the receiver"
  else
    emit netem-faults-seen false "netem's loss and duplication left no trace: retransmitted ${1:-?}, duplicates ${2:-?}"
  fi
}

# The chaos soak (examples/tests/soak.rs) on this kernel: mrc-perf server and client
# --verify in two network namespaces, faults at seeded random times, the netem kinds
# (real reordering, duplication, loss, jitter) drawn twice as often as the others. SOAK_SECS
# of runs (default 30, TCG time), a fresh seed each time (in every check's JSON). Each soak
# run is a check (every byte verified, every message completed exactly once at both ends,
# no hang); then the soak's own verdict and the netem faults it applied.
role_soak() {
  if ! $MODPROBE -a veth nf_tables nft_numgen nft_dup_netdev sch_htb sch_netem inet_diag udp_diag tcp_diag; then
    emit soak-setup false "modprobe of the soak's modules (veth nf_tables nft_numgen nft_dup_netdev sch_htb sch_netem *_diag) failed"
    return
  fi
  seed=0x$(od -An -N8 -tx8 /dev/urandom | tr -d ' \n')
  kinds=pause,loss,blackhole,cpu,dup,reorder
  kinds=$kinds,netem-reorder,netem-dup,netem-loss,netem-delay,netem-reorder,netem-dup,netem-loss,netem-delay
  MRC_SOAK_SECS=${SOAK_SECS:-30} MRC_SOAK_SEED=$seed MRC_SOAK_KINDS=$kinds MRC_SOAK_REQUIRE_NETEM=1 \
    $TESTS/soak --test-threads=1 --nocapture >$W/soak.out 2>&1
  rc=$?
  cat $W/soak.out >&2
  # `soak run N: plan P`, then `soak run N: ok: S` or `soak run N: FAILED: S`.
  awk '/^soak run [0-9]+: plan / {n = $3; sub(/:$/, "", n); p[n] = substr($0, index($0, "plan ") + 5)}
       /^soak run [0-9]+: (ok|FAILED): / {n = $3; sub(/:$/, "", n); v = $4; sub(/:$/, "", v);
         print n "\t" v "\t" p[n] "\t" substr($0, index($0, v ": ") + length(v) + 2)}' $W/soak.out >$W/soak.runs
  while IFS='	' read -r n verdict plan what; do
    x=$(jq -nc --arg s "$seed" --arg p "$plan" '{seed: $s, plan: $p}')
    if [ "$verdict" = ok ]; then
      emit "soak-run-$n" true "plan $plan: $what" "$x"
    else
      emit "soak-run-$n" false "seed $seed, plan $plan: $what" "$x"
    fi
  done <$W/soak.runs
  summary=$(grep -m1 '^soak summary:' $W/soak.out)
  runs=$(wc -l <$W/soak.runs)
  if [ $rc -eq 0 ] && [ "$runs" -gt 0 ] && echo "$summary" | grep -q ", $runs runs, $runs ok, 0 failed, .*; netem available;"; then
    emit soak true "$summary" "{\"seed\": \"$seed\", \"runs\": $runs}"
  else
    emit soak false "exit $rc, $runs runs: ${summary:-no summary line}; $(grep -E 'panicked|FAILED' $W/soak.out | head -5 | tr '\n' '|' | head -c 600)" "{\"seed\": \"$seed\"}"
  fi
  # The netem kinds were applied (the summary's `faults: KIND COUNT (S s), ...`).
  applied=$(echo "$summary" | sed -n 's/.* faults: \(.*\); netem .*/\1/p' | tr ',' '\n' | grep -o 'netem-[a-z]* [0-9]* ([0-9.]* s)' | tr '\n' ',' | sed 's/,$//; s/,/, /g')
  if [ -n "$applied" ]; then
    emit soak-netem-faults true "netem faults applied: $applied"
  else
    emit soak-netem-faults false "no netem fault was applied (seed $seed): ${summary:-no summary line}"
  fi
}

# Two hosts: rxe0 on the virtio NIC eth0, 10.0.0.1 (server) and 10.0.0.2 (client).
# The SRv6 testbed (examples/tests/testbed.rs) on this kernel, which has SRv6 lightweight
# tunnels and NEXT-C-SID: testbed/mrc-testbed.sh builds 2 hosts, 2 leaves and 4 spines as
# network namespaces, mrc-perf moves verified data steered over every spine (SRH and uSID,
# by socket header and by route) and survives a spine link taken down. MRC_SRV6_REQUIRE=1:
# a kernel that cannot build the fabric fails the check instead of skipping.
role_srv6() {
  if ! $MODPROBE -a veth inet_diag tcp_diag; then
    emit srv6-setup false "modprobe veth inet_diag tcp_diag (the fabric's links, the test's ss) failed"
    return
  fi
  # mrc-testbed.sh starts `#!/usr/bin/env bash`; the rootfs has busybox's env in /bin only.
  [ -e /usr/bin/env ] || ln -s /bin/env /usr/bin/env
  # bash's process substitution reads /dev/fd/N, which devtmpfs does not make.
  [ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
  export MRC_SRV6_REQUIRE=1
  cargo_test srv6-testbed testbed
  # examples/tests/mpi.rs's testbed test: one rank per host of the SRv6 testbed under
  # mpirun (Open MPI from the base; --variant=extract made no alternatives link, so
  # mpirun is linked here). CI=true: a missing mpirun fails the test instead of a skip.
  [ -e /usr/bin/mpirun ] || ln -s orterun /usr/bin/mpirun
  mkdir -p /dev/shm && mount -t tmpfs shm /dev/shm 2>/dev/null
  # Open MPI refuses the node name "(none)" of a guest that never set one.
  hostname srv6-lab && echo "127.0.0.1 srv6-lab localhost" >>/etc/hosts
  CI=true cargo_test_filtered srv6-mpi-testbed mpi on_the_testbed::
  # The steering over two planes (examples/tests/testbed_planes_srv6.rs): each EV socket
  # through a spine of its own plane, then plane 1 pulled mid-run. Last: its fabric of 14
  # namespaces is the largest, and the kernel tears namespaces down after `ip netns del`
  # returns.
  cargo_test srv6-testbed-planes testbed_planes_srv6
}

two_host_setup() {
  ip_addr=$1
  $MODPROBE -a virtio_pci virtio_net
  i=0
  while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
  $IP link set eth0 up && $IP addr add "$ip_addr/24" dev eth0 || return 1
  rxe_up eth0 "$ip_addr"
}

# The server serves two clients: the clean run, then one under netem on host-b's eth0.
role_host_a() {
  if ! gid=$(two_host_setup 10.0.0.1); then
    emit host-a-setup false "rxe0 on eth0 10.0.0.1: setup failed"
    return
  fi
  emit host-a-setup true "rxe0 on eth0 (10.0.0.1): active_mtu $(port_fact active_mtu), IPv4 GID index $gid"
  : >$W/srv.out
  $PERF server --persistent --fabric verbs -d $DEV -x "$gid" --bind 10.0.0.1 -p 18631 \
    >$W/srv.out 2>$W/srv.err &
  spid=$!
  i=0
  while [ "$(grep -c '^ verify: ' $W/srv.out 2>/dev/null)" -lt 2 ] && [ $i -lt 1500 ] && kill -0 $spid 2>/dev/null; do
    sleep 0.1
    i=$((i + 1))
  done
  kill $spid 2>/dev/null
  wait $spid
  cat $W/srv.out $W/srv.err >&2
  got=$(grep '^ verify: ' $W/srv.out | tr '\n' '|')
  want=" verify: 100 messages, 6553600 bytes checked, 0 bad bytes| verify: 50 messages, 3276800 bytes checked, 0 bad bytes|"
  if [ "$got" = "$want" ]; then
    emit two-hosts-server true "the server verified both clients: ${want# }"
  else
    emit two-hosts-server false "wanted \"$want\", the server said \"$got\": $(head -c 300 $W/srv.err)"
  fi
}

role_host_b() {
  if ! gid=$(two_host_setup 10.0.0.2); then
    emit host-b-setup false "rxe0 on eth0 10.0.0.2: setup failed"
    return
  fi
  mtu=$(port_fact active_mtu)
  emit host-b-setup true "rxe0 on eth0 (10.0.0.2): active_mtu $mtu, IPv4 GID index $gid"
  # Wait for the server VM (it boots at the same time).
  i=0
  until ping -c 1 -W 1 10.0.0.1 >/dev/null 2>&1 || [ $i -ge 60 ]; do i=$((i + 1)); done
  RETRY_REFUSED=120
  perf_bw two-hosts-client 100 65536 client 10.0.0.1 --fabric verbs -d $DEV -x "$gid" \
    --mtu $((mtu - 56)) --paths 16 -p 18631
  RETRY_REFUSED=0
  # A marker for the host's capture check (a 1111-byte ping: what came before it is the
  # clean run), then loss, duplication and jittered delay on everything this side sends.
  ping -c 1 -s 1111 -W 2 10.0.0.1 >/dev/null 2>&1
  $MODPROBE sch_netem
  spec="delay 1ms 1ms loss 2% duplicate 2%"
  if ! $TC qdisc add dev eth0 root netem $spec; then
    emit two-hosts-netem false "tc qdisc add dev eth0 root netem $spec failed"
    return
  fi
  perf_bw two-hosts-netem-client 50 65536 client 10.0.0.1 --fabric verbs -d $DEV -x "$gid" \
    --mtu $((mtu - 56)) --paths 16 -p 18631
  $TC -s qdisc show dev eth0 >&2
  r=$(jq -r '"\(.retransmitted_packets) \(.receiver.duplicate_datagrams)"' $W/two-hosts-netem-client.json 2>/dev/null)
  set -- $r
  if [ "${1:-0}" -gt 0 ] && [ "${2:-0}" -gt 0 ]; then
    emit two-hosts-netem-faults-seen true "verbs under netem $spec on the client's eth0: $1 packets retransmitted, $2 duplicate datagrams dropped by the server"
  else
    emit two-hosts-netem-faults-seen false "netem's loss and duplication left no trace: retransmitted ${1:-?}, duplicates ${2:-?}"
  fi
}

# Two planes (rxe-lab.sh two-planes): each VM has two NICs, eth0 on plane 0 (10.0.0.0/24)
# and eth1 on plane 1 (10.1.0.0/24), rxe0 on eth0 and rxe1 on eth1; prints the IPv4 GID
# index, the same on both devices (mrc-perf's -x is one index for all).
planes_setup() { # ADDR0 ADDR1
  $MODPROBE -a virtio_pci virtio_net
  i=0
  while { [ ! -e /sys/class/net/eth0 ] || [ ! -e /sys/class/net/eth1 ]; } && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
  $IP link set eth0 up && $IP addr add "$1/24" dev eth0 || return 1
  $IP link set eth1 up && $IP addr add "$2/24" dev eth1 || return 1
  g0=$(DEV=rxe0 rxe_up eth0 "$1") || return 1
  g1=$(DEV=rxe1 rxe_up eth1 "$2") || return 1
  [ "$g0" = "$g1" ] || { log "IPv4 GID index $g0 on rxe0, $g1 on rxe1"; return 1; }
  echo "$g0"
}

# The server of two-planes: one client over both devices, then its verify line.
role_planes_a() {
  if ! gid=$(planes_setup 10.0.0.1 10.1.0.1); then
    emit planes-a-setup false "rxe0 on eth0 10.0.0.1, rxe1 on eth1 10.1.0.1: setup failed"
    return
  fi
  emit planes-a-setup true "rxe0 on eth0 (10.0.0.1), rxe1 on eth1 (10.1.0.1): IPv4 GID index $gid"
  timeout 120 $PERF server --fabric verbs -d rxe0,rxe1 -x "$gid" --bind 10.0.0.1 -p 18641 \
    >$W/planes-srv.out 2>$W/planes-srv.err
  rc=$?
  cat $W/planes-srv.out $W/planes-srv.err >&2
  got=$(grep '^ verify: ' $W/planes-srv.out)
  case "$got" in
    *", 0 bad bytes") emit planes-server true "exit $rc: ${got# }" ;;
    *) emit planes-server false "exit $rc, the server said \"$got\": $(head -c 300 $W/planes-srv.err)" ;;
  esac
  # lib_mrc.so over both devices (MRC_PLANE_DEVICES): its C checks, the server side
  # (testbed/ocp-bench/planes-check-server.sh; its JSON line is the check
  # ocp-planes-check-server)
  LAB_PLANE_DEVICES=rxe0,rxe1 LAB_GID=$gid LAB_PEER=10.0.0.2 sh /lab/planes-check-server.sh 3>&1 >&2
}

# The client of two-planes: 6 s over both devices (EV i on plane i mod 2), eth1 (plane 1)
# set down 2 s in and up again 2 s later; every byte verified, plane 1 taken out by this
# host's own port (the plane watch) and back after. Then lib_mrc.so's C checks over both
# devices against the server VM.
role_planes_b() {
  if ! gid=$(planes_setup 10.0.0.2 10.1.0.2); then
    emit planes-b-setup false "rxe0 on eth0 10.0.0.2, rxe1 on eth1 10.1.0.2: setup failed"
    return
  fi
  mtu=$(DEV=rxe0 port_fact active_mtu)
  emit planes-b-setup true "rxe0 on eth0 (10.0.0.2), rxe1 on eth1 (10.1.0.2): active_mtu $mtu, IPv4 GID index $gid"
  # Both planes answer before the client starts: plane 0 alone let it start while eth1
  # had no route yet (ibv_create_ah: Network is unreachable on plane 1, and the server's
  # address handle towards 10.1.0.2 timed out).
  for peer in 10.0.0.1 10.1.0.1; do
    i=0
    until ping -c 1 -W 1 "$peer" >/dev/null 2>&1 || [ $i -ge 60 ]; do i=$((i + 1)); done
  done
  tries=0
  while :; do
    $PERF client 10.0.0.1 --fabric verbs -d rxe0,rxe1 -x "$gid" --mtu $((mtu - 56)) --paths 16 \
      -p 18641 -D 6 -s 65536 --verify --json >$W/planes.json 2>$W/planes.err &
    cpid=$!
    sleep 2
    rc=
    if kill -0 $cpid 2>/dev/null; then break; fi
    wait $cpid
    rc=$?
    # the server VM may still be booting
    if [ $tries -lt 60 ] && grep -q 'cannot reach server' $W/planes.json $W/planes.err; then
      tries=$((tries + 1))
      continue
    fi
    break
  done
  if [ -z "$rc" ]; then
    $IP link set eth1 down
    sleep 2
    $IP link set eth1 up
    wait $cpid
    rc=$?
  fi
  cat $W/planes.err >&2
  if [ $rc -ne 0 ]; then
    emit planes-client false "mrc-perf client -d rxe0,rxe1 exited $rc: $(head -c 300 $W/planes.err; jq -r '.error // empty' $W/planes.json 2>/dev/null)"
    return
  fi
  if jq -e '.ok and .receiver.bad_bytes == 0 and .receiver.verified_bytes == .total_bytes
      and .total_bytes > 0 and (.planes | length) == 2
      and .planes[1].downs_local == 1 and .planes[1].ups >= 1 and .planes[0].downs_local == 0
      and ([.evs[].plane] == [range(16) | . % 2])' $W/planes.json >/dev/null; then
    emit planes-client true "$(jq -r '"\(.receiver.verified_messages) x \(.msg_size_bytes) B: \(.receiver.verified_bytes) bytes verified, 0 bad; plane 1 (eth1) down 2 s: downs_local \(.planes[1].downs_local), ups \(.planes[1].ups), state at the end \(.planes[1].state); packets per plane \([.planes[].sent_packets])"' $W/planes.json)" \
      "$(jq -c '{verified_bytes: .receiver.verified_bytes, planes: [.planes[] | {plane, state, sent_packets, downs_local, downs_by_peer, ups}]}' $W/planes.json)"
  else
    emit planes-client false "expected every byte verified and plane 1 down by its port once and back: $(jq -c '{ok, total_bytes, receiver: {verified_bytes: .receiver.verified_bytes, bad_bytes: .receiver.bad_bytes}, planes, error}' $W/planes.json 2>&1 | head -c 800)"
  fi
  # lib_mrc.so over both devices: its C checks, the client side (the check
  # ocp-planes-check-client: every mrc.h check passed, both planes' NICs carried packets)
  LAB_PLANE_DEVICES=rxe0,rxe1 LAB_GID=$gid LAB_PEER=10.0.0.1 sh /lab/planes-check-client.sh 3>&1 >&2
}

# A script of the user's (rxe-lab.sh script FILE): rxe0 on lo, then FILE with its output
# on the console; passes when it exits 0.
role_script() {
  [ -e /sys/class/infiniband/$DEV ] || rxe_up lo 127.0.0.1 >/dev/null
  sh /lab/user.sh >&2
  rc=$?
  if [ $rc -eq 0 ]; then emit script true "the script exited 0"; else emit script false "the script exited $rc"; fi
}

# A script of the user's on each of two hosts (rxe-lab.sh two-hosts-script FILE_A FILE_B):
# rxe0 on eth0 as in two-hosts, then /lab/user-SIDE.sh with LAB_ADDR, LAB_PEER and LAB_GID
# set, its output on the console and its fd 3 on the results port (JSON lines); passes
# when it exits 0.
role_host_script() { # SIDE ADDR PEER
  if ! gid=$(two_host_setup "$2"); then
    emit host-$1-script-setup false "rxe0 on eth0 $2: setup failed"
    return
  fi
  emit host-$1-script-setup true "rxe0 on eth0 ($2): active_mtu $(port_fact active_mtu), IPv4 GID index $gid"
  LAB_ADDR=$2 LAB_PEER=$3 LAB_GID=$gid sh /lab/user-$1.sh 3>&1 >&2
  rc=$?
  if [ $rc -eq 0 ]; then emit host-$1-script true "the script exited 0"; else emit host-$1-script false "the script exited $rc"; fi
}

# A script of the user's on each of the two-planes hosts (rxe-lab.sh two-planes-script
# FILE_A FILE_B): rxe0 on eth0 and rxe1 on eth1 as in two-planes, then /lab/user-SIDE.sh
# with LAB_ADDR, LAB_PEER (plane 0), LAB_ADDR1, LAB_PEER1 (plane 1), LAB_GID (both
# devices' IPv4 GID index) and LAB_PLANE_DEVICES=rxe0,rxe1 set, its output on the console
# and its fd 3 on the results port; passes when it exits 0.
role_planes_script() { # SIDE ADDR0 ADDR1 PEER0 PEER1
  if ! gid=$(planes_setup "$2" "$3"); then
    emit planes-$1-script-setup false "rxe0 on eth0 $2, rxe1 on eth1 $3: setup failed"
    return
  fi
  emit planes-$1-script-setup true "rxe0 on eth0 ($2), rxe1 on eth1 ($3): active_mtu $(port_fact active_mtu), IPv4 GID index $gid"
  LAB_ADDR=$2 LAB_ADDR1=$3 LAB_PEER=$4 LAB_PEER1=$5 LAB_GID=$gid LAB_PLANE_DEVICES=rxe0,rxe1 \
    sh /lab/user-$1.sh 3>&1 >&2
  rc=$?
  if [ $rc -eq 0 ]; then emit planes-$1-script true "the script exited 0"; else emit planes-$1-script false "the script exited $rc"; fi
}

for role in $(echo "$1" | tr , ' '); do
  log "role $role"
  NCHECKS=0
  case $role in
    single) role_single ;;
    perftest) role_perftest ;;
    netem) role_netem ;;
    soak) role_soak ;;
    srv6) role_srv6 ;;
    host-a) role_host_a ;;
    host-b) role_host_b ;;
    planes-a) role_planes_a ;;
    planes-b) role_planes_b ;;
    script) role_script ;;
    host-a-script) role_host_script a 10.0.0.1 10.0.0.2 ;;
    host-b-script) role_host_script b 10.0.0.2 10.0.0.1 ;;
    planes-a-script) role_planes_script a 10.0.0.1 10.1.0.1 10.0.0.2 10.1.0.2 ;;
    planes-b-script) role_planes_script b 10.0.0.2 10.1.0.2 10.0.0.1 10.1.0.1 ;;
    *) emit "$role" false "unknown role $role" ;;
  esac
  emit "$role-complete" true "$NCHECKS checks ran"
done
