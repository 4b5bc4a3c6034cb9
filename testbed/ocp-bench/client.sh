# testbed/rxe-lab.sh two-hosts-script testbed/ocp-bench/server.sh testbed/ocp-bench/client.sh,
# with MRC_LAB_EXTRA holding OCP's mrc_example and lib_mrc.so (docs/OCP_MRC.md, "Two VMs").
# VM B (10.0.0.2): OCP's mrc_example client, then ib_write_bw clients at the same sizes.
export LD_LIBRARY_PATH=/lab/extra
SIZES="1 2 4 8 16 32 64 128 256 512 1024 2048 4096 8192 16384 32768 65536 131072 262144 524288 1048576"
i=0
until ping -c 1 -W 1 "$LAB_PEER" >/dev/null 2>&1 || [ $i -ge 60 ]; do i=$((i + 1)); done
echo "== $(date +%T) uptime $(cut -d' ' -f1 /proc/uptime): mrc_example client to $LAB_PEER, GID index $LAB_GID"
n=0
while :; do
  t0=$(cut -d' ' -f1 /proc/uptime)
  /lab/extra/mrc_example -d rxe0 -g "$LAB_GID" -n 100 -s 1048576 -w 10 -p 18650 "$LAB_PEER" >/tmp/cli.out 2>&1
  rc=$?
  if [ $rc -ne 0 ] && grep -q 'Failed to connect' /tmp/cli.out && [ $n -lt 120 ]; then n=$((n + 1)); sleep 1; continue; fi
  break
done
t1=$(cut -d' ' -f1 /proc/uptime)
cat /tmp/cli.out
echo "== $(date +%T) uptime $t1: mrc_example client exited $rc after $n connect retries (the sweep took $t0 .. $t1 s of guest uptime)"
rows=$(awk '$1 ~ /^[0-9]+$/ && NF == 4 && $2 == 100' /tmp/cli.out | wc -l)
jq -ncM --argjson rc $rc --argjson r "$rows" '{check:"ocp-bench-client", ok:($rc == 0 and $r == 21), detail:"mrc_example client exit \($rc), \($r) of 21 sizes in its table"}' >&3
awk '$1 ~ /^[0-9]+$/ && NF == 4 && $2 == 100 {printf "{\"check\":\"ocp-bench-%s\",\"ok\":true,\"detail\":\"mrc_example %s bytes: %s Gbps, %s Mpps\",\"msg_bytes\":%s,\"gbps\":%s,\"msg_per_s\":%.0f}\n", $1, $1, $3, $4, $1, $3, $4 * 1e6}' /tmp/cli.out >&3
for s in $SIZES; do
  n=0
  while :; do
    ib_write_bw -d rxe0 -x "$LAB_GID" -F -s $s -n 100 -p 18651 "$LAB_PEER" >/tmp/ibc.out 2>&1
    r=$?
    if [ $r -ne 0 ] && grep -q "Couldn't connect" /tmp/ibc.out && [ $n -lt 60 ]; then n=$((n + 1)); sleep 1; continue; fi
    break
  done
  line=$(awk -v s=$s '$1 == s && NF >= 5 && $2 == 100' /tmp/ibc.out | tail -1)
  echo "ib_write_bw -s $s (exit $r, $n retries): ${line:-$(tail -3 /tmp/ibc.out | tr '\n' '|')}"
  set -- $line
  if [ $r -eq 0 ] && [ -n "$line" ]; then
    jq -ncM --argjson s $s --argjson pk "$3" --argjson av "$4" --argjson mpps "$5" \
      '{check:"ib_write_bw-\($s)", ok:true, detail:"ib_write_bw \($s) bytes: \($av) MB/s average, \($mpps) Mpps", msg_bytes:$s, mib_per_s:$av, msg_per_s:($mpps * 1e6 | round)}' >&3
  else
    jq -ncM --argjson s $s --argjson r $r '{check:"ib_write_bw-\($s)", ok:false, detail:"ib_write_bw \($s) bytes failed (exit \($r))"}' >&3
  fi
done
echo "== $(date +%T) uptime $(cut -d' ' -f1 /proc/uptime): ib_write_bw clients done"
[ $rc -eq 0 ] && [ "$rows" = 21 ]
