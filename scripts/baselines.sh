#!/usr/bin/env bash
# Side-by-side loopback measurements (issues 6 and 23): mrc goodput and CPU per byte against
# the raw UDP ceiling (same sockets, batching and datagram size, no reliability) and kernel
# TCP (iperf3 when installed), at each burst size of BURSTS and for each UDP datapath
# mechanics variant of MECHS, and 8-byte latency against a UDP ping-pong on the same
# datapath. Every figure is the median of RUNS runs, the runs interleaved (run 1 of every
# row, then run 2, ...) so that a change in machine load hits all rows alike; the ratios
# (mrc / TCP goodput and CPU per byte, variant / plain) are medians of per-run ratios, each measured
# side by side in one run.
#
# Usage: scripts/baselines.sh [RUNS] [DURATION_S]   (RUNS >= 1, DURATION_S > 0 seconds)
# Environment:
#   MRC_PERF=PATH     run that mrc-perf binary instead of building target/release/mrc-perf
#   BURSTS="1 16"     the --burst-size values (packets per EV per GSO send; 1 = spraying)
#   MECHS="plain"     datapath variants, any of: plain off multishot coop zerocopy all
#                     nohuge depthN shared
#                     (plain: the defaults, multishot receive and cooperative task work
#                     on; off: both off; multishot, coop: that one alone; zerocopy:
#                     --udp-zerocopy beside the defaults; all = multishot and coop, the
#                     defaults, zero-copy left out: on loopback it stalls mrc); nohuge:
#                     the defaults with --huge-pages=false (regions on base pages); depthN
#                     (N in 1..999): the defaults with -t N on the mrc --verify row (N
#                     messages of 1 MiB in flight instead of 8; the regions shrink with it);
#                     shared: the defaults with --engines 1 --shared-engine on the mrc
#                     --verify row (both ends' QPs on one engine thread)
#   MRC_PERF_BEFORE=PATH  also run that (older) mrc-perf as variant "before", plain
#   LAT=1             the latency rows (0: skip)
#   CONN_BENCH=1      also run the state machines' criterion bench (cargo bench -p
#                     mrc-transport --bench conn, minutes) and report ns per packet of its
#                     4096-byte case and of its 64-byte case (no copy cost: the state
#                     machines alone), sender plus receiver on one core
#   CALLGRIND=1       also count the state machines' instructions per packet under
#                     valgrind --tool=callgrind (scripts/callgrind_conn.sh; needs valgrind)
#   SIM=1             also run `mrc-sim experiment speed-raw` RUNS times and report the
#                     median of its checked row (MRC_SIM=PATH: that mrc-sim, else built;
#                     MRC_SIM_BEFORE=PATH: an older one too, runs interleaved)
#   ENGINES="1 2"     also the multi-engine scaling curve (scripts/engines_curve.sh RUNS
#                     DURATION_S: -q K QPs over K engine threads per context, for each K)
#   ALL=1             all of the above (CONN_BENCH=1 CALLGRIND=1 SIM=1, ENGINES="1 2"
#                     unless set)
#   JSON_OUT=PATH     also write the JSON there
# Output: the table on stdout, then one JSON object (the same figures, and every run).
# Ports: loopback and baseline take kernel-chosen ports (receive sockets on port 0, EV
# source ports from the allocator, which skips taken ones; iperf3 on a port the kernel just
# handed out), so runs beside other benchmarks and tests do not collide.
# Any failure prints a message (with mrc-perf's stderr) and exits 1.
set -euo pipefail
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,46p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
usage="usage: scripts/baselines.sh [RUNS] [DURATION_S] (RUNS a positive integer, DURATION_S positive seconds; defaults 3 3)"
RUNS=${1:-3}
DUR=${2:-3}
BURSTS=${BURSTS:-1 16}
MECHS=${MECHS:-plain}
LAT=${LAT:-1}
if [ "${ALL:-0}" = 1 ]; then
  CONN_BENCH=1 CALLGRIND=1 SIM=1 ENGINES=${ENGINES:-1 2}
fi
ENGINES=${ENGINES:-}
if ! [[ $RUNS =~ ^[1-9][0-9]*$ ]]; then
  echo "baselines.sh: RUNS must be a positive integer, got '$RUNS'" >&2
  echo "$usage" >&2
  exit 1
fi
if ! [[ $DUR =~ ^[0-9]*\.?[0-9]+$ && $DUR =~ [1-9] ]]; then
  echo "baselines.sh: DURATION_S must be a positive number of seconds, got '$DUR'" >&2
  echo "$usage" >&2
  exit 1
fi
for b in $BURSTS; do
  [[ $b =~ ^[1-9][0-9]*$ ]] || { echo "baselines.sh: BURSTS must hold positive integers, got '$b'" >&2; exit 1; }
done
mech_flags() {
  case $1 in
    plain | before) echo "" ;;
    off) echo "--udp-multishot=false --udp-coop-taskrun=false" ;;
    multishot) echo "--udp-multishot --udp-coop-taskrun=false" ;;
    coop) echo "--udp-multishot=false --udp-coop-taskrun" ;;
    zerocopy) echo "--udp-zerocopy" ;;
    nohuge) echo "--huge-pages=false" ;;
    all) echo "--udp-multishot --udp-coop-taskrun" ;;
    depth[1-9] | depth[1-9][0-9] | depth[1-9][0-9][0-9] | shared) echo "" ;;
    *) echo "baselines.sh: unknown MECHS entry '$1' (plain off multishot coop zerocopy nohuge all depthN shared)" >&2; return 1 ;;
  esac
}
# mrc_row_flags VARIANT: the flags of the mrc --verify row alone (depthN: -t N, N messages in
# flight; shared: both ends on one engine thread).
mrc_row_flags() {
  case $1 in
    depth*) echo "-t ${1#depth}" ;;
    shared) echo "--engines 1 --shared-engine" ;;
    *) echo "" ;;
  esac
}
for v in $MECHS; do mech_flags "$v" >/dev/null; done
for k in $ENGINES; do
  [[ $k =~ ^[1-9][0-9]*$ ]] || { echo "baselines.sh: ENGINES must hold positive integers, got '$k'" >&2; exit 1; }
done
if [ "${CALLGRIND:-0}" = 1 ] && ! command -v valgrind >/dev/null 2>&1; then
  echo "baselines.sh: CALLGRIND=1 needs valgrind (apt-get install valgrind)" >&2
  exit 1
fi
command -v jq >/dev/null 2>&1 || { echo "baselines.sh: needs jq (apt-get install jq)" >&2; exit 1; }
cd "$(dirname "$0")/.."
if [ -n "${MRC_PERF:-}" ]; then
  P=$MRC_PERF
else
  cargo build --release -q -p mrc-examples --bin mrc-perf \
    || { echo "baselines.sh: cargo build of mrc-perf failed" >&2; exit 1; }
  P=${CARGO_TARGET_DIR:-target}/release/mrc-perf
fi
VARIANTS=""
[ -n "${MRC_PERF_BEFORE:-}" ] && VARIANTS="before"
VARIANTS="$VARIANTS $MECHS"
bin_of() { if [ "$1" = before ]; then echo "$MRC_PERF_BEFORE"; else echo "$P"; fi; }
label_of() { if [ "$1" = before ]; then echo "mrc-perf (before)"; else echo "mrc-perf"; fi; }
# Per-run figures go to a private directory, removed on exit.
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# run BIN LABEL ARGS...: BIN's JSON on stdout; tried twice; on a second failure its stderr
# and exit 1 (the caller's
# `x=$(run ...)` then stops the script under set -e).
run() {
  local bin=$1 label=$2 rc=0
  shift 2
  "$bin" "$@" >"$T/stdout" 2>"$T/stderr" || rc=$?
  if [ "$rc" != 0 ]; then
    # Once more: on a machine shared with other jobs a run can fail on its own (a
    # timeout); a second failure ends the script.
    echo "baselines.sh: $label $* failed (exit code $rc), once more; its stderr:" >&2
    tail -5 "$T/stderr" >&2
    rc=0
    "$bin" "$@" >"$T/stdout" 2>"$T/stderr" || rc=$?
  fi
  if [ "$rc" != 0 ]; then
    echo "baselines.sh: $label $* failed (exit code $rc):" >&2
    cat "$T/stderr" >&2
    exit 1
  fi
  cat "$T/stdout"
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "null"; else printf "%.15g\n", (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
m() { if [ -s "$1" ]; then median <"$1"; else echo null; fi; }
# One JSON line per measurement: {run, burst, variant, what, gbps, cpu_s_per_gb, ...}.
: >"$T/rows"
progress() { echo "baselines.sh: run $i/$RUNS: $*" >&2; }
tcp_name="kernel TCP"
for i in $(seq "$RUNS"); do
  for b in $BURSTS; do
    for v in $VARIANTS; do
      bin=$(bin_of "$v")
      # shellcheck disable=SC2046 # the flags are words
      set -- $(mech_flags "$v")
      # 4096-byte payload, 16 EVs, 1 MiB messages, every byte checked.
      # shellcheck disable=SC2046
      j=$(run "$bin" "$(label_of "$v")" loopback -s 1048576 --paths 16 --mtu 4096 -D "$DUR" --burst-size "$b" \
        --udp-port 0 --verify --json "$@" $(mrc_row_flags "$v"))
      bad=$(jq -r '.receiver.bad_bytes' <<<"$j")
      [ "$bad" = 0 ] || { echo "baselines.sh: verify failed: $bad bad bytes" >&2; exit 1; }
      jq -c --argjson i "$i" --argjson b "$b" --arg v "$v" \
        '{run: $i, burst: $b, variant: $v, what: "mrc", gbps: .bw_avg_gbps,
          cpu_s_per_gb: .cpu_s_per_gb}' \
        <<<"$j" >>"$T/rows"
      progress "burst $b $v: mrc --verify $(jq -r '.bw_avg_gbps' <<<"$j") Gb/s"
      k=$(run "$bin" "$(label_of "$v")" baseline -s 1048576 --paths 16 --mtu 4096 -D "$DUR" --burst-size "$b" \
        --json "$@")
      jq -c --argjson i "$i" --argjson b "$b" --arg v "$v" \
        '{run: $i, burst: $b, variant: $v, what: "udp", gbps: .baselines[0].gbps,
          cpu_s_per_gb: .baselines[0].cpu_s_per_gb},
         {run: $i, burst: $b, variant: $v, what: "tcp", gbps: .baselines[1].gbps,
          cpu_s_per_gb: .baselines[1].cpu_s_per_gb}' <<<"$k" >>"$T/rows"
      tcp_name=$(jq -r '.baselines[1].name' <<<"$k")
      progress "burst $b $v: raw UDP $(jq -r '.baselines[0].gbps' <<<"$k") Gb/s, $tcp_name $(jq -r '.baselines[1].gbps' <<<"$k") Gb/s"
    done
  done
  if [ "$LAT" = 1 ]; then
    for v in $VARIANTS; do
      bin=$(bin_of "$v")
      # shellcheck disable=SC2046
      set -- $(mech_flags "$v")
      l=$(run "$bin" "$(label_of "$v")" loopback --test lat -s 8 -n 20000 --udp-port 0 --verify --json "$@")
      jq -c --argjson i "$i" --arg v "$v" \
        '{run: $i, variant: $v, what: "mrc_lat", p50_us: .lat_us.typical, p99_us: .lat_us.p99}' \
        <<<"$l" >>"$T/rows"
      u=$(run "$bin" "$(label_of "$v")" baseline --test lat -s 8 -n 20000 --json "$@")
      jq -c --argjson i "$i" --arg v "$v" \
        '{run: $i, variant: $v, what: "udp_lat", p50_us: .baselines[0].lat_us.typical,
          p99_us: .baselines[0].lat_us.p99}' <<<"$u" >>"$T/rows"
      progress "$v: mrc latency median $(jq -r '.lat_us.typical' <<<"$l") us, UDP ping-pong $(jq -r '.baselines[0].lat_us.typical' <<<"$u") us"
    done
  fi
done
# sel FIELD JQ-FILTER: the values of FIELD of the rows the filter keeps, one a line (a run
# whose report lacked the figure is left out).
sel() { jq -r "select($2) | .$1 | select(. != null)" <"$T/rows"; }
# ratio NUM-FILTER DEN-FILTER FIELD: per run, NUM's FIELD over DEN's (one row each).
ratio() {
  jq -s -r --arg f "$3" "
    (map(select($1)) | map({key: (.run|tostring), value: .[\$f]}) | from_entries) as \$n |
    (map(select($2)) | map({key: (.run|tostring), value: .[\$f]}) | from_entries) as \$d |
    \$n | keys[] | select(\$n[.] != null and \$d[.] != null and \$d[.] != 0) | \$n[.] / \$d[.]" <"$T/rows"
}
med() { sel "$1" "$2" | median; }
medr() { ratio "$1" "$2" "$3" | median; }
: >"$T/summary"
echo "runs: $RUNS x ${DUR}s interleaved, loopback 127.0.0.1, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "bw: 1 MiB messages, 4096-byte payload, 16 EVs; medians; ratios are medians of per-run ratios"
first=$(echo "$VARIANTS" | awk '{print $1}')
printf '%-5s %-10s %-26s %8s %9s %9s %9s %9s %9s\n' burst variant row "Gb/s" "CPU s/GB" "x TCP" "CPU x TCP" "x $first" "CPU x $first"
for b in $BURSTS; do
  for v in $VARIANTS; do
    for w in mrc udp tcp; do
      f=".burst == $b and .variant == \"$v\" and .what == \"$w\""
      t=".burst == $b and .variant == \"$v\" and .what == \"tcp\""
      base=".burst == $b and .variant == \"$first\" and .what == \"$w\""
      g=$(med gbps "$f"); c=$(med cpu_s_per_gb "$f")
      xt=$(medr "$f" "$t" gbps); ct=$(medr "$f" "$t" cpu_s_per_gb); xb=$(medr "$f" "$base" gbps); xc=$(medr "$f" "$base" cpu_s_per_gb)
      case $w in mrc) name="mrc --verify" ;; udp) name="raw UDP blast" ;; tcp) name="$tcp_name" ;; esac
      [ "$w" = tcp ] && xt=null && ct=null
      printf '%-5s %-10s %-26.26s %8.2f %9.3f %9s %9s %9s %9s\n' "$b" "$v" "$name" "$g" "$c" \
        "$([ "$xt" = null ] && echo - || printf '%.2f' "$xt")" \
        "$([ "$ct" = null ] && echo - || printf '%.2f' "$ct")" \
        "$([ "$xb" = null ] && echo - || printf '%.2f' "$xb")" \
        "$([ "$xc" = null ] && echo - || printf '%.2f' "$xc")"
      jq -nc --argjson b "$b" --arg v "$v" --arg w "$w" --arg name "$name" \
        --argjson g "$g" --argjson c "$c" --argjson xt "$xt" --argjson ct "$ct" \
        --argjson xb "$xb" --argjson xc "$xc" \
        '{burst: $b, variant: $v, what: $w, name: $name, gbps: $g, cpu_s_per_gb: $c,
          gbps_x_tcp: $xt, cpu_x_tcp: $ct, gbps_x_first_variant: $xb, cpu_x_first_variant: $xc}' >>"$T/summary"
    done
  done
done
if [ "$LAT" = 1 ]; then
  printf '%-16s %-26s %10s %9s\n' variant "lat (8 B, one way)" "median us" "p99 us"
  for v in $VARIANTS; do
    for w in mrc_lat udp_lat; do
      f=".variant == \"$v\" and .what == \"$w\""
      p50=$(med p50_us "$f"); p99=$(med p99_us "$f")
      printf '%-16s %-26s %10.2f %9.2f\n' "$v" \
        "$([ $w = mrc_lat ] && echo "mrc --verify" || echo "UDP ping-pong")" "$p50" "$p99"
      jq -nc --arg v "$v" --arg w "$w" --argjson a "$p50" --argjson p "$p99" \
        '{variant: $v, what: $w, p50_us: $a, p99_us: $p}' >>"$T/summary"
    done
  done
fi
extra='{}'
if [ "${CONN_BENCH:-0}" = 1 ]; then
  echo "baselines.sh: cargo bench -p mrc-transport --bench conn (minutes)" >&2
  cargo bench -q -p mrc-transport --bench conn -- --noplot >"$T/bench" 2>&1 \
    || { echo "baselines.sh: cargo bench failed:" >&2; cat "$T/bench" >&2; exit 1; }
  # criterion's median per iteration (256 packets) of a case, in ns per packet
  case_ns() {
    local est
    est=$(find "${CARGO_TARGET_DIR:-target}/criterion" -path "*$1/new/estimates.json" | head -1)
    [ -n "$est" ] || { echo "baselines.sh: no criterion estimate for '$1'" >&2; exit 1; }
    jq -r '.median.point_estimate / 256' "$est"
  }
  ns=$(case_ns '1MiB write, 4096-byte packets')
  ns64=$(case_ns '16KiB write, 64-byte packets (no copy cost)')
  printf 'state machines (criterion, sender+receiver, one core): %.0f ns per 4096-byte packet (%.2f M packets/s), %.0f ns per packet without copy cost (%.2f M packets/s)\n' \
    "$ns" "$(awk -v n="$ns" 'BEGIN {print 1e3/n}')" "$ns64" "$(awk -v n="$ns64" 'BEGIN {print 1e3/n}')"
  extra=$(jq -c --argjson ns "$ns" --argjson ns64 "$ns64" \
    '. + {conn_bench_ns_per_packet: $ns, conn_bench_no_copy_ns_per_packet: $ns64}' <<<"$extra")
else
  echo "state machines: cargo bench -p mrc-transport --bench conn (CONN_BENCH=1 runs it here)"
fi
if [ "${CALLGRIND:-0}" = 1 ]; then
  echo "baselines.sh: scripts/callgrind_conn.sh (a minute)" >&2
  scripts/callgrind_conn.sh >"$T/callgrind" 2>&1 \
    || { echo "baselines.sh: scripts/callgrind_conn.sh failed:" >&2; cat "$T/callgrind" >&2; exit 1; }
  cg='{}'
  for mode in write hot small; do
    n=$(awk -v m="$mode:" '$1 == m {print $2}' "$T/callgrind")
    [[ $n =~ ^[0-9]+$ ]] || { echo "baselines.sh: no callgrind figure for $mode:" >&2; cat "$T/callgrind" >&2; exit 1; }
    cg=$(jq -c --arg m "$mode" --argjson n "$n" '. + {($m): $n}' <<<"$cg")
  done
  printf 'state machines (callgrind, sender+receiver): %s instructions per packet (write: 4096-byte payloads; hot: cached buffers; small: 64-byte payloads)\n' \
    "$(jq -r 'to_entries | map("\(.key) \(.value)") | join(", ")' <<<"$cg")"
  extra=$(jq -c --argjson cg "$cg" '. + {callgrind_instructions_per_packet: $cg}' <<<"$extra")
else
  echo "state machines: scripts/callgrind_conn.sh (CALLGRIND=1 runs it here)"
fi
if [ "${SIM:-0}" = 1 ]; then
  if [ -n "${MRC_SIM:-}" ]; then
    S=$MRC_SIM
  else
    cargo build --release -q -p mrc-examples --bin mrc-sim \
      || { echo "baselines.sh: cargo build of mrc-sim failed" >&2; exit 1; }
    S=${CARGO_TARGET_DIR:-target}/release/mrc-sim
  fi
  sims="now"
  [ -n "${MRC_SIM_BEFORE:-}" ] && sims="before now"
  : >"$T/sim"
  for i in $(seq "$RUNS"); do
    for w in $sims; do
      sb=$S
      [ "$w" = before ] && sb=$MRC_SIM_BEFORE
      s=$(run "$sb" "mrc-sim ($w)" experiment speed-raw --json -)
      # the checked row, "raw frames (switching core)": its hops_per_s value
      hops=$(jq -r '[.. | objects | select(has("rows")) | .rows[]
        | select(.label | startswith("raw frames (switching core)"))
        | .values[] | select(.[0] == "hops_per_s") | .[1]][0]' <<<"$s")
      [[ $hops =~ ^[0-9.e+]+$ ]] || { echo "baselines.sh: speed-raw gave no checked row" >&2; exit 1; }
      echo "$w $hops" >>"$T/sim"
      progress "simulator ($w): $hops packet hops/s"
    done
  done
  for w in $sims; do
    hops=$(awk -v w="$w" '$1 == w {print $2}' "$T/sim" | median)
    label="simulator"
    [ "$sims" != now ] && label="simulator ($w)"
    printf '%s, speed-raw checked row: %.2f M packet hops/s (median of %s)\n' "$label" "$(awk -v h="$hops" 'BEGIN {print h/1e6}')" "$RUNS"
    key=sim_speed_raw_hops_per_s
    [ "$w" = before ] && key=sim_speed_raw_hops_per_s_before
    extra=$(jq -c --arg k "$key" --argjson h "$hops" '. + {($k): $h}' <<<"$extra")
  done
else
  echo "simulator: mrc-sim experiment speed-raw (SIM=1 runs it here)"
fi
if [ -n "$ENGINES" ]; then
  echo "baselines.sh: scripts/engines_curve.sh $RUNS $DUR (ENGINES=\"$ENGINES\")" >&2
  # its progress lines and errors go to stderr as they come
  MRC_PERF=$P ENGINES=$ENGINES scripts/engines_curve.sh "$RUNS" "$DUR" >"$T/engines" \
    || { echo "baselines.sh: scripts/engines_curve.sh failed (its message above)" >&2; exit 1; }
  # its table, then its JSON object on the last line
  sed '$d' "$T/engines"
  extra=$(jq -c --argjson e "$(tail -1 "$T/engines")" '. + {engines_curve: $e}' <<<"$extra")
else
  echo "multi-core: scripts/engines_curve.sh (ENGINES=\"1 2\" runs it here)"
fi
json=$(jq -s -c --argjson runs "$RUNS" --argjson dur "$DUR" --argjson extra "$extra" \
  --slurpfile rows "$T/rows" \
  '{runs: $runs, duration_s: $dur, summary: ., extra: $extra, per_run: $rows}' "$T/summary")
echo "$json"
[ -n "${JSON_OUT:-}" ] && echo "$json" >"$JSON_OUT"
exit 0
