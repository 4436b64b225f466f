#!/usr/bin/python3
"""Compute beside a Gloo all-reduce on this CPU, and the all-reduce beside compute.

Two processes, each bound to one core with one intra-op thread as
dtsim_worker's ranks are (Note [A rank's own cores]). Per size, each rank
times a 64 x 64 fp32 GEMM chain alone and a run of all-reduces alone (one
after the other, each waited for, about 20 ms), then both at once: a helper
thread issues the same all-reduces while the rank's own thread runs GEMMs.
It prints, per size, the medians over the repeats of the slower rank's
  compute slowdown    s = (GEMM time beside the all-reduces) / (alone) - 1
  collective slowdown c = (all-reduces' time beside compute) / (alone) - 1
An overlapped collective costs the step (1 + c) s / (1 + s) of its time
alone when compute runs all the while beside it (the compute it displaced),
against 1 for running it in series: docs/validation-cpu.md, "Compute beside
a collective". Debian's python3-torch (no PyPI):

  bench/cpu-interference.py [--reps 7] [--max-mib 16] [--json]
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time


def rank_main(rank, world, store, args, out):
    import torch
    import torch.distributed as dist

    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    torch.set_num_threads(1)
    # A file, not a port found free: another socket may take a port before
    # rank 0 binds it (Note [Local rendezvous] in runtime/src/launcher.cpp).
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    a, b = torch.rand(64, 64), torch.rand(64, 64)

    def unit_alone():
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(200):
                torch.mm(a, b)
            times.append((time.perf_counter() - t0) / 200)
        return statistics.median(times)

    def slowest(x):
        t = torch.tensor([x], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    for _ in range(500):
        torch.mm(a, b)
    rows = []
    size = 16 * 1024
    while size <= args.max_mib * 1024 * 1024:
        buf = torch.ones(size // 4)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(3):
            dist.all_reduce(buf)
        count = int(min(2000, max(4, 0.02 / slowest((time.perf_counter() - t0) / 3))))
        s_list, c_list = [], []
        for _ in range(args.reps):
            alone = unit_alone()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(count):
                dist.all_reduce(buf)
            comm_alone = time.perf_counter() - t0
            dist.barrier()
            span = {}

            def comm():
                span["start"] = time.perf_counter()
                for _ in range(count):
                    dist.all_reduce(buf)
                span["end"] = time.perf_counter()

            helper = threading.Thread(target=comm)
            helper.start()
            ends = []
            while helper.is_alive():
                torch.mm(a, b)
                ends.append(time.perf_counter())
            helper.join()
            units = sum(1 for e in ends if span["start"] < e <= span["end"])
            interval = span["end"] - span["start"]
            s_list.append(max(0.0, interval / (max(units, 1) * alone) - 1))
            c_list.append(interval / comm_alone - 1)
        s, c = slowest(statistics.median(s_list)), slowest(statistics.median(c_list))
        rows.append({"bytes": size, "compute_slowdown": s, "collective_slowdown": c,
                     "overlap_cost": (1 + c) * s / (1 + s), "reps": args.reps, "count": count})
        size *= 4
    if rank == 0:
        out.write(json.dumps(rows))
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=7, help="repeats per size (default 7)")
    p.add_argument("--max-mib", type=int, default=16, help="largest all-reduce in MiB (default 16)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = p.parse_args()
    if args.reps < 1 or args.max_mib < 1:
        print(f"cpu-interference.py: --reps {args.reps} --max-mib {args.max_mib}: each must be at least 1", file=sys.stderr)
        sys.exit(2)
    tmp = tempfile.mkdtemp(prefix="dtsim-interference-")
    store = os.path.join(tmp, "rendezvous")
    r, w = os.pipe()
    pids = []
    for rank in range(2):
        pid = os.fork()
        if pid == 0:
            os.close(r)
            code = 0
            try:
                with os.fdopen(w, "w") as out:
                    rank_main(rank, 2, store, args, out)
            except BaseException as e:  # one line, then the exit status
                print(f"cpu-interference.py: rank {rank}: {e}", file=sys.stderr)
                code = 1
            os._exit(code)
        pids.append(pid)
    os.close(w)
    with os.fdopen(r) as f:
        text = f.read()
    status = [os.waitpid(pid, 0)[1] for pid in pids]
    shutil.rmtree(tmp, ignore_errors=True)
    if any(status) or not text:
        print("cpu-interference.py: a rank failed (its line above says why)", file=sys.stderr)
        sys.exit(2)
    rows = json.loads(text)
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'all-reduce':>10} {'compute s':>10} {'collective c':>13} {'overlap cost':>13}")
    for row in rows:
        size = row["bytes"]
        label = f"{size // (1024 * 1024)} MiB" if size >= 1024 * 1024 else f"{size // 1024} KiB"
        print(f"{label:>10} {row['compute_slowdown']:>10.2f} {row['collective_slowdown']:>13.2f} {row['overlap_cost']:>13.2f}")


if __name__ == "__main__":
    main()
