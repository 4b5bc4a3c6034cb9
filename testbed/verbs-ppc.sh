#!/bin/sh
# verbs-ppc.sh: a `testbed/rxe-lab.sh script` guest script (issue 20 item 3): the verbs
# datapath's cost per packet beside `ib_send_bw -c UD`, interleaved in one VM so host load
# hits every contender alike. Contenders (each one 4096-byte UD datagram per message):
#   ud    ib_send_bw -c UD -d rxe0 -x 1 -F -s 4096 -n N (two processes, server and client)
#   PROG  mrc-perf loopback --fabric verbs -d rxe0 -x 1 --mtu 4040 -s 4040 -n N --cc none
#         --progress caller, for every /lab/extra/mrc-perf-* (/lab/bin/mrc-perf if none)
#         (two test threads in one process, each progressing its own end)
# Each contender runs at N = $SMALL and N = $BIG in every round; the guest's busy CPU time
# (/proc/stat: user + nice + system + irq + softirq, all vCPUs) over each whole run, so
# startup (TCG's translation of a new process) is in both and the difference over
# BIG - SMALL packets is the marginal CPU per packet. Lines `PPC name n=N ...` on the
# console; `PPCJSON {...}` one JSON object per run.
# Env (or /lab/extra/ppc.env): ROUNDS [3], SMALL [1600], BIG [9600]; PROFILE=1: `perf
# record -a` over one BIG run of each contender (a perf binary at /lab/extra/perf, its
# libraries in /lab/extra/lib), PROF_ARGS [-e cpu-clock -F 2000], PROF_SORT [--sort sym],
# PROF_WHO [ud and every mrc-perf]. Even rounds run the mrc-perfs in reverse order.
set -u
# Settings may come in with MRC_LAB_EXTRA as /lab/extra/ppc.env.
[ -f /lab/extra/ppc.env ] && . /lab/extra/ppc.env
ROUNDS=${ROUNDS:-3}
SMALL=${SMALL:-1600}
BIG=${BIG:-9600}
W=/tmp/ppc
mkdir -p $W
DEV=rxe0

# busy and total jiffies (USER_HZ) of all vCPUs
cpu_j() { awk '/^cpu / {b=$2+$3+$4+$7+$8; t=b+$5+$6+$9; print b, t; exit}' /proc/stat; }
hz() { getconf CLK_TCK 2>/dev/null || echo 100; }
HZ=$(hz)
# ms since boot (busybox date has no %N)
now_ms() { awk '{printf "%d", $1 * 1000}' /proc/uptime; }

# ud NAME N: ib_send_bw -c UD, server and client; prints MB/s of the client's row.
run_ud() {
  name=$1 n=$2 port=$3
  set -- $(cpu_j); b0=$1 t0=$2; w0=$(now_ms)
  ib_send_bw -c UD -d $DEV -x 1 -F -s 4096 -n "$n" -p "$port" >$W/$name.server 2>&1 &
  spid=$!
  sleep 1
  ib_send_bw -c UD -d $DEV -x 1 -F -s 4096 -n "$n" -p "$port" 127.0.0.1 >$W/$name.client 2>&1
  rc=$?
  wait $spid
  set -- $(cpu_j); b1=$1 t1=$2; w1=$(now_ms)
  ${AFTER_RUN:-:}
  mib=$(awk '$1 ~ /^[0-9]+$/ && NF >= 5 {row=$4} END {print row + 0}' $W/$name.client)
  report "$name" ud "$n" "$rc" "$mib" "$n" "0" "$((b1 - b0))" "$((t1 - t0))" "$((w1 - w0))" null
}

# run_mrc NAME BIN N PORT
run_mrc() {
  name=$1 bin=$2 n=$3 port=$4
  set -- $(cpu_j); b0=$1 t0=$2; w0=$(now_ms)
  $bin loopback --fabric verbs -d $DEV -x 1 --mtu 4040 -s 4040 -n "$n" --cc none \
    --progress caller -p "$port" --json >$W/$name.json 2>$W/$name.err
  rc=$?
  set -- $(cpu_j); b1=$1 t1=$2; w1=$(now_ms)
  ${AFTER_RUN:-:}
  mib=$(jq -r '.bw_avg_mib_per_s // 0' $W/$name.json 2>/dev/null)
  txd=$(jq -r '.datapath.tx_datagrams // 0' $W/$name.json 2>/dev/null)
  txc=$(jq -r '.datapath.tx_calls // 0' $W/$name.json 2>/dev/null)
  rxd=$(jq -r '.datapath.rx_datagrams // 0' $W/$name.json 2>/dev/null)
  cpu=$(jq -r '.cpu_s // 0' $W/$name.json 2>/dev/null)
  ok=$(jq -r --argjson n "$n" '.ok and .iterations == $n and .receiver.completions == $n' $W/$name.json 2>/dev/null)
  [ "$ok" = true ] || { rc=${rc:-1}; [ $rc -eq 0 ] && rc=99; head -c 400 $W/$name.err >&2; }
  report "$name" "$(basename $bin)" "$n" "$rc" "$mib" "$txd" "$txc" "$((b1 - b0))" "$((t1 - t0))" "$((w1 - w0))" \
    "$(jq -c '{cpu_s, elapsed_s, datapath}' $W/$name.json 2>/dev/null || echo null)"
}

# report NAME KIND N RC MIB TX_DATAGRAMS TX_CALLS BUSY_J TOTAL_J WALL_MS EXTRA
report() {
  pps=$(awk -v m="$5" 'BEGIN {printf "%.0f", m * 1048576 / 4096}')
  echo "PPC $1 kind=$2 n=$3 rc=$4 MB/s=$5 pkt/s=$pps busy_s=$(awk -v j=$8 -v h=$HZ 'BEGIN {printf "%.2f", j / h}') total_s=$(awk -v j=$9 -v h=$HZ 'BEGIN {printf "%.2f", j / h}') wall_ms=${10} tx_datagrams=$6 tx_calls=$7" >&2
  echo "PPCJSON {\"name\":\"$1\",\"kind\":\"$2\",\"n\":$3,\"rc\":$4,\"mib_per_s\":$5,\"pps\":$pps,\"busy_j\":$8,\"total_j\":$9,\"hz\":$HZ,\"wall_ms\":${10},\"tx_datagrams\":$6,\"tx_calls\":$7,\"mrc\":${11}}" >&2
}

BINS=""
for b in /lab/extra/mrc-perf-* ; do [ -x "$b" ] && BINS="$BINS $b"; done
[ -n "$BINS" ] || BINS=/lab/bin/mrc-perf
RBINS=""
for b in $BINS; do RBINS="$b $RBINS"; done
echo "PPC clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)" >&2
echo "PPC contenders: ud $BINS; rounds $ROUNDS, n $SMALL and $BIG, $(nproc) vCPUs, HZ $HZ" >&2
port=19000
r=1
while [ $r -le $ROUNDS ]; do
  for n in $SMALL $BIG; do
    port=$((port + 1)); run_ud "ud-r$r-n$n" "$n" $port
    # Even rounds run the mrc-perfs in the reverse order (no binary always goes first).
    order=$BINS
    [ $((r % 2)) -eq 0 ] && order=$RBINS
    for b in $order; do
      port=$((port + 1)); run_mrc "$(basename $b)-r$r-n$n" "$b" "$n" $port
    done
  done
  r=$((r + 1))
done

stop_perf() { kill -INT "$1"; wait "$1"; }
if [ "${PROFILE:-0}" = 1 ] && [ -x /lab/extra/perf ]; then
  PERFB="env LD_LIBRARY_PATH=/lab/extra/lib /lab/extra/perf"
  for b in ${PROF_WHO:-ud $BINS}; do
    port=$((port + 1))
    nm=$(basename $b)
    $PERFB record -a ${PROF_ARGS:--e cpu-clock -F 2000} -o $W/$nm.perf.data >/dev/null 2>&1 &
    ppid=$!
    sleep 2
    AFTER_RUN="stop_perf $ppid"
    if [ $b = ud ]; then run_ud "prof-ud" $BIG $port; else run_mrc "prof-$nm" $b $BIG $port; fi
    AFTER_RUN=""
    echo "PPCPROF $nm begin" >&2
    $PERFB report -i $W/$nm.perf.data --no-children ${PROF_SORT:---sort sym} --stdio 2>/dev/null | grep -v '^$' | grep '%' | head -60 >&2
    echo "PPCPROF $nm comm" >&2
    $PERFB report -i $W/$nm.perf.data --no-children --sort comm,dso --stdio 2>/dev/null | grep '%' | head -20 >&2
    echo "PPCPROF $nm end" >&2
  done
fi
exit 0
