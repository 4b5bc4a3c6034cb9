# testbed/rxe-lab.sh two-planes-script testbed/ocp-bench/planes-check-server.sh \
#   testbed/ocp-bench/planes-check-client.sh: lib_mrc.so's own C checks
# (fabric/ocp-mrc/c/mrc_check.c: every mrc.h call, immediates in order, exact bytes, three
# forbidden WRITEs refused by the device) between two VMs, every QP over both planes
# (MRC_PLANE_DEVICES=rxe0,rxe1: EV i on plane i mod 2). Needs nothing outside this
# repository (OCP's benchmark: planes-server.sh). VM A: the server.
export MRC_PLANE_DEVICES=$LAB_PLANE_DEVICES
export LD_LIBRARY_PATH=/lab/bin
# packets through each plane's NIC (both directions) during the checks
pkts() { echo $(( $(cat /sys/class/net/$1/statistics/rx_packets) + $(cat /sys/class/net/$1/statistics/tx_packets) )); }
e0=$(pkts eth0) e1=$(pkts eth1)
echo "== $(date +%T): mrc_check server on rxe0 over $MRC_PLANE_DEVICES, GID index $LAB_GID"
timeout 300 /lab/bin/mrc_check server -d rxe0 -x "$LAB_GID" -p 18700 >/tmp/chk.out 2>/tmp/chk.err
rc=$?
cat /tmp/chk.out /tmp/chk.err
want="mrc_check server: 4 immediates in order, 1052672 bytes verified (302702 written), 0 bad; 4 COMM_EST + 3 QP_ACCESS_ERR events"
d0=$(( $(pkts eth0) - e0 )) d1=$(( $(pkts eth1) - e1 ))
echo "== packets through eth0 (plane 0) $d0, eth1 (plane 1) $d1"
ok=false
if [ $rc -eq 0 ] && grep -qxF "$want" /tmp/chk.out && grep -qxF "mrc_check server: all checks passed" /tmp/chk.out \
    && [ $d0 -ge 100 ] && [ $d1 -ge 100 ]; then ok=true; fi
jq -ncM --argjson ok $ok --argjson rc $rc --argjson d0 $d0 --argjson d1 $d1 --arg w "$want" \
  '{check:"ocp-planes-check-server", ok:$ok, detail:"mrc_check server over rxe0,rxe1: exit \($rc), packets through plane 0 \($d0), plane 1 \($d1) (each >= 100: about 300 and 190 in the first run); wanted: \($w)"}' >&3
$ok
