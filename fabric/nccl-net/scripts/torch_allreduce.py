#!/usr/bin/env python3
"""Two-rank torch.distributed all_reduce over the spray plugin, next to NCCL's socket
transport, on one GPU (the check docs/NCCL.md names for a machine with an NVIDIA GPU,
PyTorch and NCCL). NOT YET RUN: no GPU machine was at hand when it was written.

    python3 torch_allreduce.py --plugin /abs/path/libnccl-net-spray.so

Both ranks use cuda:0; distinct NCCL_HOSTIDs make NCCL treat them as two nodes, so with
P2P and SHM off every byte goes over the network plugin. Each size is checked exactly
(ranks contribute 1.0 and 2.0; the sum 3.0 is exact in float32) and its bus bandwidth
printed (busbw = bytes x 2(n-1)/n / time, nccl-tests' definition). Exit status 0 only if
every result was exact and NCCL's log showed the chosen network in use.
"""
import argparse
import os
import subprocess
import sys
import time


def rank_main(args):
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    ok = True
    for size in args.sizes:
        n = max(1, size // 4)
        x = torch.full((n,), float(rank + 1), dtype=torch.float32, device="cuda")
        for _ in range(args.warmup):
            y = x.clone()
            dist.all_reduce(y)
        torch.cuda.synchronize()
        times = []
        for _ in range(args.iters):
            y = x.clone()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            dist.all_reduce(y)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        want = float(world * (world + 1) // 2)
        exact = bool(torch.all(y == want).item())
        ok &= exact
        t = sorted(times)[len(times) // 2]
        busbw = n * 4 * 2 * (world - 1) / world / t / 1e9
        if rank == 0:
            print(f"{args.label:8s} {n * 4:>10d} B  median {t * 1e6:10.1f} us  "
                  f"busbw {busbw:7.3f} GB/s  {'exact' if exact else 'WRONG'}", flush=True)
    dist.destroy_process_group()
    return 0 if ok else 1


def launch(args, label, env_extra):
    port = str(29500 + (os.getpid() % 1000) + (7 if label == "socket" else 0))
    procs = []
    for rank in range(2):
        env = dict(os.environ)
        env.update({
            "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port, "NCCL_HOSTID": f"spray-host-{rank}",
            "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NVLS_ENABLE": "0",
            "NCCL_SOCKET_IFNAME": "lo", "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET",
        })
        env.update(env_extra)
        cmd = [sys.executable, __file__, "--rank-main", "--label", label,
               "--iters", str(args.iters), "--warmup", str(args.warmup),
               "--sizes", *map(str, args.sizes)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=args.timeout)[0] for p in procs]
    for o in outs:
        for line in o.splitlines():
            if not line.startswith(tuple("0123456789")) and "NCCL INFO" not in line:
                print(line)
    want = env_extra.get("NCCL_NET", "Socket")
    used = any(f"via NET/{want}" in o or f"Using network {want}" in o for o in outs)
    if not used:
        print(f"{label}: NCCL's log does not show network {want} in use")
    return all(p.returncode == 0 for p in procs) and used


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plugin", help="absolute path of libnccl-net-spray.so")
    ap.add_argument("--sizes", type=int, nargs="+",
                    default=[4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--label", default="")
    ap.add_argument("--rank-main", action="store_true")
    args = ap.parse_args()
    if args.rank_main:
        return rank_main(args)
    if not args.plugin:
        ap.error("--plugin is required")
    ok = launch(args, "spray", {"NCCL_NET_PLUGIN": args.plugin, "NCCL_NET": "spray"})
    ok &= launch(args, "socket", {"NCCL_NET_PLUGIN": "none", "NCCL_NET": "Socket"})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
