"""torch.distributed's gloo side of bench/peers/comm.sh: the collectives `zrepro bench
comm` times, at the same sizes (S: the whole array in bytes, float32; each rank holds
S / ranks of a reduce-scatter's output and an all-gather's input), as the mean of
--iters timed calls after --warmup, the slowest rank's figure. An op gloo does not
implement is reported with time_us null.

usage: comm_peers.py --ranks 2 --min-bytes 65536 --max-bytes 16777216 --iters 20
prints JSON rows: op, bytes, ranks, time_us.
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

OPS = ["all_reduce", "reduce_scatter", "all_gather", "broadcast"]


def run_op(op, out, inp, ws):
    if op == "all_reduce":
        dist.all_reduce(inp)
    elif op == "reduce_scatter":
        dist.reduce_scatter_tensor(out, inp)
    elif op == "all_gather":
        dist.all_gather_into_tensor(out, inp)
    else:
        dist.broadcast(inp, 0)


def worker(rank, a, port, q):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    ws = a.ranks
    rows = []
    for op in OPS:
        b = a.min_bytes
        while b <= a.max_bytes:
            count = max(ws, b // 4 // ws * ws)
            inp = torch.ones(count // ws if op == "all_gather" else count)
            out = torch.empty(count // ws if op == "reduce_scatter" else count) if op in ("reduce_scatter", "all_gather") else inp
            try:
                for _ in range(a.warmup):
                    run_op(op, out, inp, ws)
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(a.iters):
                    run_op(op, out, inp, ws)
                t = torch.tensor([(time.perf_counter() - t0) / a.iters], dtype=torch.float64)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                us = t.item() * 1e6
            except (RuntimeError, NotImplementedError, ValueError):
                us = None
                dist.barrier()
            rows.append({"op": op, "bytes": count * 4, "ranks": ws, "time_us": us})
            b *= 2
    if rank == 0:
        q.put(rows)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--min-bytes", type=int, default=65536)
    ap.add_argument("--max-bytes", type=int, default=16 << 20)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--port", type=int, default=29613)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.start_processes(worker, args=(a, a.port, q), nprocs=a.ranks, start_method="spawn")
    print(json.dumps(q.get()))


if __name__ == "__main__":
    main()
