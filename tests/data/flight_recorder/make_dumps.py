"""Real PyTorch Flight Recorder dumps for zrepro diagnose's tests.

PyTorch's own Flight Recorder (torch._C._distributed_c10d._dump_fr_trace, the pickle
TORCH_NCCL_DUMP_ON_TIMEOUT writes per rank) records every collective a rank issued. This
script runs two gloo ranks on the CPU that stop agreeing, lets the collective time out,
and writes each rank's dump, as a job would leave them in TORCH_NCCL_DEBUG_INFO_TEMP_FILE:
  mismatched/rank_0, rank_1   rank 1 issues one all_reduce more; rank 0 goes on to an all_gather
  divergent/rank_0, rank_1    both all_gather at the same step with different sizes (ZeRO-3
                              gathering different parameters, as MoE routing makes it)
Run with PyTorch >= 2.6 (written with 2.11.0): TORCH_FR_BUFFER_SIZE=200 python make_dumps.py OUT_DIR
"""
import datetime, os, sys, time
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def write_dump(out, kind, rank):
    os.makedirs(os.path.join(out, kind), exist_ok=True)
    data = torch._C._distributed_c10d._dump_fr_trace()
    with open(os.path.join(out, kind, f"rank_{rank}"), "wb") as f:
        f.write(data)


def rank_main(rank, kind, out, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCH_FR_BUFFER_SIZE="200")
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=4))
    t = torch.ones(1024)
    for _ in range(3):
        dist.all_reduce(t)
    if kind == "mismatched":
        try:
            if rank == 1:
                dist.all_reduce(t)  # the extra micro-step's reduction
            else:
                dist.all_gather_into_tensor(torch.empty(2048), t)
        except Exception as e:  # the timeout
            print(f"rank {rank}: {type(e).__name__}: {str(e)[:120]}", flush=True)
        write_dump(out, kind, rank)
    else:
        # Each rank issues its gather and writes its dump before the other's data arrives
        # (gloo aborts a process when the two sizes meet, where NCCL would hang): rank 0
        # first, and it leaves; rank 1 two seconds later.
        if rank == 1:
            time.sleep(2)
        mine = torch.ones(1024 if rank == 0 else 4096)
        dist.all_gather_into_tensor(torch.empty(2 * mine.numel()), mine, async_op=True)
        write_dump(out, kind, rank)
    os._exit(0)  # a timed-out group cannot be destroyed cleanly


if __name__ == "__main__":
    out = sys.argv[1]
    for i, kind in enumerate(["mismatched", "divergent"]):
        try:
            mp.spawn(rank_main, args=(kind, out, 29600 + i), nprocs=2, join=True)
        except mp.ProcessExitedException as e:  # gloo's abort once the dumps are written
            print(kind, ":", str(e)[:100])
    print("torch", torch.__version__)
