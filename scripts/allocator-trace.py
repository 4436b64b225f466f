#!/usr/bin/env python3
"""Records PyTorch's CUDA caching allocator through a few training steps.

Issue 28, item 7: users see the allocator's *reserved* memory (nvidia-smi,
out-of-memory errors), dtsim predicts *allocated*. This trains a GPT-2-like
decoder written as a user would (torch.nn, AdamW, bf16 autocast, optional
activation checkpointing per block) for a few steps with the allocator's
history recorded (torch.cuda.memory._record_memory_history, no stacks), and
writes every allocator event and each step's allocated and reserved peaks to
one gzipped JSON: the data a model of the allocator is checked against
(replaying the events must give the reserved peaks measured).

  scripts/allocator-trace.py --out trace.json.gz [--configs name,...] [--steps 3]

Each config runs in a process of its own (the allocator starts empty and an
environment setting such as expandable_segments takes effect). Event rows are
[action, address, size, stream] with action one of the snapshot's names.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

CONFIGS = {
    # name: hidden, layers, heads, seq, micro_batch, recompute, alloc_conf
    "gpt2-b8": (768, 12, 12, 1024, 8, False, ""),
    "gpt2-b8-recompute": (768, 12, 12, 1024, 8, True, ""),
    "gpt2-medium-b4": (1024, 24, 16, 1024, 4, False, ""),
    "gpt2-medium-b4-recompute": (1024, 24, 16, 1024, 4, True, ""),
    "gpt2-b8-expandable": (768, 12, 12, 1024, 8, False, "expandable_segments:True"),
}


def run_one(name, steps, out_path):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    hidden, layers, heads, seq, batch, recompute, _ = CONFIGS[name]
    vocab = 50257
    dev = torch.device("cuda")

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(hidden)
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.proj = nn.Linear(hidden, hidden)
            self.ln2 = nn.LayerNorm(hidden)
            self.fc = nn.Linear(hidden, 4 * hidden)
            self.out = nn.Linear(4 * hidden, hidden)

        def forward(self, x):
            b, s, h = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
            q, k, v = (t.view(b, s, heads, h // heads).transpose(1, 2) for t in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, hidden)
            self.wpe = nn.Embedding(seq, hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = nn.LayerNorm(hidden)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = checkpoint(blk, x, use_reentrant=False) if recompute else blk(x)
            return F.linear(self.ln(x), self.wte.weight)

    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=2_000_000)
    model = GPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    params = sum(p.numel() for p in model.parameters())
    gen = torch.Generator(device=dev).manual_seed(0)
    step_rows = []
    for step in range(steps):
        torch.cuda.reset_peak_memory_stats()
        idx = torch.randint(0, vocab, (batch, seq), device=dev, generator=gen)
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(idx)
        loss = F.cross_entropy(logits.float().view(-1, vocab), idx.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        st = torch.cuda.memory_stats()
        step_rows.append({
            "step": step,
            "seconds": time.perf_counter() - t0,
            "allocated_peak": st["allocated_bytes.all.peak"],
            "reserved_peak": st["reserved_bytes.all.peak"],
            "allocated_end": st["allocated_bytes.all.current"],
            "reserved_end": st["reserved_bytes.all.current"],
            "segments": st["segment.all.current"],
            "alloc_retries": st["num_alloc_retries"],
        })
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = snap["device_traces"][0] if snap["device_traces"] else []
    events = [[e["action"], e["addr"], e["size"], e["stream"]] for e in trace]
    segments = [{"size": s["total_size"], "allocated": s["allocated_size"], "active": s["active_size"],
                 "pool": s["segment_type"], "blocks": len(s["blocks"])} for s in snap["segments"]]
    result = {
        "config": name, "hidden": hidden, "layers": layers, "heads": heads, "seq": seq, "micro_batch": batch,
        "recompute": recompute, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "params": params,
        "torch": torch.__version__, "device": torch.cuda.get_device_name(0), "steps": step_rows,
        "segments_at_end": segments, "events": events, "events_dropped": len(trace) >= 2_000_000,
    }
    with open(out_path, "w") as f:
        json.dump(result, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="the gzipped JSON to write (required)")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated: " + ", ".join(CONFIGS))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--one-out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        run_one(a.one, a.steps, a.one_out)
        return 0
    if not a.out:
        ap.error("the following arguments are required: --out")
    names = [n for n in a.configs.split(",") if n]
    for n in names:
        if n not in CONFIGS:
            print(f"allocator-trace: --configs: '{n}' is not one of {', '.join(CONFIGS)}", file=sys.stderr)
            return 2
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in names:
            path = os.path.join(tmp, n + ".json")
            env = dict(os.environ)
            if CONFIGS[n][6]:
                env["PYTORCH_CUDA_ALLOC_CONF"] = CONFIGS[n][6]
            t0 = time.time()
            rc = subprocess.call([sys.executable, __file__, "--one", n, "--one-out", path, "--steps", str(a.steps)], env=env)
            if rc != 0 or not os.path.exists(path):
                print(f"allocator-trace: {n}: exit status {rc}", file=sys.stderr)
                continue
            with open(path) as f:
                r = json.load(f)
            last = r["steps"][-1]
            print(f"{n}: {len(r['events'])} events, last step allocated peak {last['allocated_peak'] / 2**20:.0f} MiB, "
                  f"reserved peak {last['reserved_peak'] / 2**20:.0f} MiB ({time.time() - t0:.0f} s)", flush=True)
            results.append(r)
    tmp_out = a.out + ".tmp"
    with gzip.open(tmp_out, "wt") as f:
        json.dump({"version": 1, "runs": results}, f)
    os.replace(tmp_out, a.out)
    return 0 if len(results) == len(names) else 1


if __name__ == "__main__":
    sys.exit(main())
