# testbed/rxe-lab.sh two-hosts-script testbed/ocp-bench/server.sh testbed/ocp-bench/client.sh,
# with MRC_LAB_EXTRA holding OCP's mrc_example and lib_mrc.so (docs/OCP_MRC.md, "Two VMs").
# VM A (10.0.0.1): OCP's mrc_example server, then one ib_write_bw server per size.
export LD_LIBRARY_PATH=/lab/extra
SIZES="1 2 4 8 16 32 64 128 256 512 1024 2048 4096 8192 16384 32768 65536 131072 262144 524288 1048576"
echo "== $(date +%T) uptime $(cut -d' ' -f1 /proc/uptime): mrc_example server, GID index $LAB_GID"
MRC_LOG_LEVEL=DEBUG /lab/extra/mrc_example -d rxe0 -g "$LAB_GID" -n 100 -s 1048576 -w 10 -p 18650 >/tmp/srv.out 2>&1
rc=$?
grep -v 'SYNC\|Starting iteration\|posting RECV\|Validating' /tmp/srv.out
passed=$(grep -c 'Data validation passed' /tmp/srv.out)
bad=$(grep -c 'Data validation found\|Data mismatch' /tmp/srv.out)
echo "== $(date +%T) uptime $(cut -d' ' -f1 /proc/uptime): mrc_example server exited $rc; validation passed $passed, failed $bad"
jq -ncM --argjson rc $rc --argjson p "$passed" --argjson b "$bad" \
  '{check:"ocp-bench-server", ok:($rc == 0 and $p == 21 and $b == 0), detail:"mrc_example server exit \($rc), Data validation passed \($p) of 21, failed \($b)"}' >&3
for s in $SIZES; do
  ib_write_bw -d rxe0 -x "$LAB_GID" -F -s $s -n 100 -p 18651 >/tmp/ibs.out 2>&1 || { echo "ib_write_bw server -s $s failed:"; cat /tmp/ibs.out; }
done
echo "== $(date +%T) uptime $(cut -d' ' -f1 /proc/uptime): ib_write_bw servers done"
[ $rc -eq 0 ] && [ "$passed" = 21 ] && [ "$bad" = 0 ]
