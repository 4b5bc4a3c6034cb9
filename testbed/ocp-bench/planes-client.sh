# testbed/rxe-lab.sh two-planes-script testbed/ocp-bench/planes-server.sh \
#   testbed/ocp-bench/planes-client.sh (see planes-server.sh).
# VM B (10.0.0.2 on rxe0/eth0, 10.1.0.2 on rxe1/eth1): OCP's mrc_example client on rxe0
# over both devices (MRC_PLANE_DEVICES=rxe0,rxe1); 10 s into the sweep this VM's eth1
# (plane 1) goes down for 2 s: the QPs go on over plane 0 (plane 1 out by its port) and
# the server validates every size.
export LD_LIBRARY_PATH=/lab/extra
export MRC_PLANE_DEVICES=$LAB_PLANE_DEVICES
# packets through each plane's NIC (both directions) during the sweep
pkts() { echo $(( $(cat /sys/class/net/$1/statistics/rx_packets) + $(cat /sys/class/net/$1/statistics/tx_packets) )); }
i=0
until ping -c 1 -W 1 "$LAB_PEER" >/dev/null 2>&1 || [ $i -ge 60 ]; do i=$((i + 1)); done
echo "== $(date +%T) uptime $(cut -d' ' -f1 /proc/uptime): mrc_example client to $LAB_PEER over $MRC_PLANE_DEVICES, GID index $LAB_GID"
( sleep 10; echo "== $(date +%T): eth1 (plane 1) down"; /bin/ip link set eth1 down
  sleep 2; /bin/ip link set eth1 up; echo "== $(date +%T): eth1 (plane 1) up" ) &
pull=$!
e0=$(pkts eth0) e1=$(pkts eth1)
n=0
while :; do
  t0=$(cut -d' ' -f1 /proc/uptime)
  /lab/extra/mrc_example -d rxe0 -g "$LAB_GID" -n 100 -s 1048576 -w 10 -p 18650 "$LAB_PEER" >/tmp/cli.out 2>&1
  rc=$?
  if [ $rc -ne 0 ] && grep -q 'Failed to connect' /tmp/cli.out && [ $n -lt 120 ]; then n=$((n + 1)); sleep 1; continue; fi
  break
done
t1=$(cut -d' ' -f1 /proc/uptime)
wait $pull
d0=$(( $(pkts eth0) - e0 )) d1=$(( $(pkts eth1) - e1 ))
echo "== packets through eth0 (plane 0) $d0, eth1 (plane 1) $d1"
cat /tmp/cli.out
echo "== $(date +%T) uptime $t1: mrc_example client exited $rc after $n connect retries (the sweep took $t0 .. $t1 s of guest uptime)"
rows=$(awk '$1 ~ /^[0-9]+$/ && NF == 4 && $2 == 100' /tmp/cli.out | wc -l)
jq -ncM --argjson rc $rc --argjson r "$rows" --argjson d0 $d0 --argjson d1 $d1 '{check:"ocp-planes-client", ok:($rc == 0 and $r == 21 and $d0 >= 1000 and $d1 >= 1000), detail:"mrc_example client over rxe0,rxe1 (eth1 down 2 s): exit \($rc), \($r) of 21 sizes in its table; packets through plane 0 \($d0), plane 1 \($d1) (each >= 1000)"}' >&3
awk '$1 ~ /^[0-9]+$/ && NF == 4 && $2 == 100 {printf "{\"check\":\"ocp-planes-%s\",\"ok\":true,\"detail\":\"mrc_example over two planes %s bytes: %s Gbps, %s Mpps\",\"msg_bytes\":%s,\"gbps\":%s,\"msg_per_s\":%.0f}\n", $1, $1, $3, $4, $1, $3, $4 * 1e6}' /tmp/cli.out >&3
[ $rc -eq 0 ] && [ "$rows" = 21 ] && [ $d0 -ge 1000 ] && [ $d1 -ge 1000 ]
