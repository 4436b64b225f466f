#!/usr/bin/python3
"""dtsim calibrate's Python host probe (Note [Python host cost] in
sim/src/cost/cost_python.cpp; Note [Python host probe] in
calibrate/src/driver.cpp).

Times, from Python, what dtsim_torch_bench times from C++ (its kernels
"host_ops" and "host_step"): the same torch.nn modules on tiny tensors,
called op by op as a user's forward calls them, and an AdamW step of
torch.optim over 1 and 16 tensors of 64 elements, so that their difference
is the interpreter's time, not the kernels'. Prints calibration records
(Note [Bench line protocol] in calibrate/src/bench_common.hpp):

  info    python  3.11.2
  info    torch   1.13.1
  kernel  python_ops   fp32  OPS 1 1 1  0 0  MEDIAN MIN MAX REPS
  kernel  python_step  fp32  PARAMS TENSORS 1 1  0 0  MEDIAN MIN MAX REPS

or, where torch cannot be imported, one "skip" record, and exits 0.

  calibrate/src/python_host_probe.py [--device cpu|cuda] [--threads N] [--budget S]
"""
import argparse
import statistics
import sys
import time

# Mirrored in dtsim_torch_bench (calibrate/src/torch_bench.cpp): the same
# shapes, repeats and tensors.
WIDTH = 64        # features of the modules' tiny tensors
ROWS = 8          # rows of their input
REPEATS = 16      # Linear, LayerNorm, GELU and a residual add, this many times
OPS_PER_REPEAT = 4
STEP_ELEMENTS = 64  # elements of each tensor an optimizer step updates
STEP_TENSORS = (1, 16)


def record(*fields):
    print("\t".join(str(f) for f in fields), flush=True)


def timed(run, budget, sync):
    """Median, min, max seconds of `run` over at least 5 runs and `budget` s."""
    for _ in range(3):  # warm-up
        run()
    sync()
    times = []
    start = time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - start < budget and len(times) < 100000):
        t0 = time.perf_counter()
        run()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times), len(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads, as dtsim_torch_bench's (0: torch's default)")
    ap.add_argument("--budget", type=float, default=0.2, help="seconds of runs for each measurement")
    args = ap.parse_args()
    try:
        import torch
        import torch.nn as nn
    except Exception as e:  # noqa: BLE001 - any failure to import is a skip
        record("skip", "python", "torch cannot be imported by " + sys.executable + ": " + str(e).splitlines()[0])
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        record("skip", "python", "torch.cuda.is_available() is False in " + sys.executable)
        return 0
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    record("info", "python", sys.version.split()[0])
    record("info", "torch", torch.__version__)
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    torch.manual_seed(0)

    # A forward as users write one: modules called op by op, autograd recording.
    lin, norm, act = nn.Linear(WIDTH, WIDTH).to(dev), nn.LayerNorm(WIDTH).to(dev), nn.GELU()
    x = torch.randn(ROWS, WIDTH, device=dev)

    def forward():
        y = x
        for _ in range(REPEATS):
            y = act(norm(lin(y))) + y
        return y

    med, lo, hi, reps = timed(forward, args.budget, sync)
    record("kernel", "python_ops", "fp32", REPEATS * OPS_PER_REPEAT, 1, 1, 1, 0, 0, "%.9g" % med, "%.9g" % lo, "%.9g" % hi, reps)

    # torch.optim's AdamW as a user makes it (its default implementation).
    for tensors in STEP_TENSORS:
        params = [torch.zeros(STEP_ELEMENTS, device=dev, requires_grad=True) for _ in range(tensors)]
        for p in params:
            p.grad = torch.randn(STEP_ELEMENTS, device=dev)
        opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)  # the runtime's, and AdamW's default
        med, lo, hi, reps = timed(opt.step, args.budget, sync)
        record("kernel", "python_step", "fp32", STEP_ELEMENTS * tensors, tensors, 1, 1, 0, 0,
               "%.9g" % med, "%.9g" % lo, "%.9g" % hi, reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
