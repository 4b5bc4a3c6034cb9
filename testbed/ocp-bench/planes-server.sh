# testbed/rxe-lab.sh two-planes-script testbed/ocp-bench/planes-server.sh \
#   testbed/ocp-bench/planes-client.sh, with MRC_LAB_EXTRA holding OCP's mrc_example and
# lib_mrc.so (docs/OCP_MRC.md, "Several planes").
# VM A (10.0.0.1 on rxe0/eth0, 10.1.0.1 on rxe1/eth1): OCP's mrc_example server on rxe0,
# lib_mrc.so spreading every QP over both devices (MRC_PLANE_DEVICES=rxe0,rxe1: the
# default EV profile's 16 EVs, EV i on plane i mod 2); every size's data validated.
export LD_LIBRARY_PATH=/lab/extra
export MRC_PLANE_DEVICES=$LAB_PLANE_DEVICES
echo "== $(date +%T) uptime $(cut -d' ' -f1 /proc/uptime): mrc_example server on rxe0 over $MRC_PLANE_DEVICES, GID index $LAB_GID"
MRC_LOG_LEVEL=DEBUG /lab/extra/mrc_example -d rxe0 -g "$LAB_GID" -n 100 -s 1048576 -w 10 -p 18650 >/tmp/srv.out 2>&1
rc=$?
grep -v 'SYNC\|Starting iteration\|posting RECV\|Validating' /tmp/srv.out
passed=$(grep -c 'Data validation passed' /tmp/srv.out)
bad=$(grep -c 'Data validation found\|Data mismatch' /tmp/srv.out)
echo "== $(date +%T) uptime $(cut -d' ' -f1 /proc/uptime): mrc_example server exited $rc; validation passed $passed, failed $bad"
jq -ncM --argjson rc $rc --argjson p "$passed" --argjson b "$bad" \
  '{check:"ocp-planes-server", ok:($rc == 0 and $p == 21 and $b == 0), detail:"mrc_example server over rxe0,rxe1: exit \($rc), Data validation passed \($p) of 21, failed \($b)"}' >&3
[ $rc -eq 0 ] && [ "$passed" = 21 ] && [ "$bad" = 0 ]
