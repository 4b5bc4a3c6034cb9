# testbed/rxe-lab.sh two-planes-script testbed/ocp-bench/planes-check-server.sh \
#   testbed/ocp-bench/planes-check-client.sh (see planes-check-server.sh). VM B: the
# client, retrying while the server is not listening yet.
export MRC_PLANE_DEVICES=$LAB_PLANE_DEVICES
export LD_LIBRARY_PATH=/lab/bin
# packets through each plane's NIC (both directions) during the checks
pkts() { echo $(( $(cat /sys/class/net/$1/statistics/rx_packets) + $(cat /sys/class/net/$1/statistics/tx_packets) )); }
e0=$(pkts eth0) e1=$(pkts eth1)
i=0
until ping -c 1 -W 1 "$LAB_PEER" >/dev/null 2>&1 || [ $i -ge 60 ]; do i=$((i + 1)); done
n=0
while :; do
  timeout 300 /lab/bin/mrc_check client "$LAB_PEER" -d rxe0 -x "$LAB_GID" -p 18700 >/tmp/chk.out 2>/tmp/chk.err
  rc=$?
  if [ $rc -ne 0 ] && grep -qi 'connect' /tmp/chk.err && ! grep -q 'COMM_EST' /tmp/chk.out && [ $n -lt 60 ]; then
    n=$((n + 1)); sleep 1; continue
  fi
  break
done
cat /tmp/chk.out /tmp/chk.err
want="mrc_check client: 7 messages + 3 forbidden (each REM_ACCESS_ERR, ERR, reset) + 1 last WRITE, 17 send completions, 4 COMM_EST, reply of 3000 bytes verified"
d0=$(( $(pkts eth0) - e0 )) d1=$(( $(pkts eth1) - e1 ))
echo "== packets through eth0 (plane 0) $d0, eth1 (plane 1) $d1"
ok=false
if [ $rc -eq 0 ] && grep -qxF "$want" /tmp/chk.out && grep -qxF "mrc_check client: all checks passed" /tmp/chk.out \
    && [ $d0 -ge 100 ] && [ $d1 -ge 100 ]; then ok=true; fi
jq -ncM --argjson ok $ok --argjson rc $rc --argjson d0 $d0 --argjson d1 $d1 --argjson n $n --arg w "$want" \
  '{check:"ocp-planes-check-client", ok:$ok, detail:"mrc_check client over rxe0,rxe1: exit \($rc), packets through plane 0 \($d0), plane 1 \($d1) (each >= 100: about 300 and 190 in the first run) after \($n) connect retries; wanted: \($w)"}' >&3
$ok
