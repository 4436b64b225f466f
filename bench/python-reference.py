#!/usr/bin/python3
"""The validation suite's Python reference (issue 28, item 5).

The suite's tiny models written as a PyTorch user writes them (torch.nn
modules, nanoGPT's GPT-2 block, HuggingFace's BERT layout, nn.LSTM),
trained by an ordinary loop with Debian's python3-torch (LibTorch 1.13,
the same kernels dtsim_worker runs): DistributedDataParallel for `ddp`,
DDP with ZeroRedundancyOptimizer for `zero1`, one process for `single`.
It measures what such a user pays a step, Python included, so the suite
can set dtsim's prediction for a Python runtime beside it.

  bench/python-reference.py --model gpt2-tiny --plan ddp --procs 2
starts its ranks itself with torchrun's variables (RANK, WORLD_SIZE;
Debian 12's torchrun fails under Python 3.11 in its elastic agent) and
DTSIM_RENDEZVOUS=file:PATH, or joins a job whose launcher set RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
Prints one JSON line: the step's median over the measured steps of the
slowest rank's time, each rank's median, the parameter count and the
loss, as `dtsim validate` reports its runs.

Shapes are the built-ins' (models/src/zoo.cpp): gpt2-tiny 2 layers,
hidden 128, 4 heads, vocabulary 1024, 128 tokens; bert-tiny
(google/bert_uncased_L-2_H-128_A-2) 2 layers, hidden 128, 2 heads, 512
tokens, pooled; bilstm-tiny input 64, hidden 64, 2 bidirectional
layers, 33 classes, 32 steps. Micro-batch 4, the shipped plans'.
"""
import argparse
import json
import math
import os
import signal
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class Gpt2Block(nn.Module):
    """nanoGPT's Block: pre-LayerNorm, causal attention, GELU (tanh) MLP."""

    def __init__(self, h, heads, seq, p):
        super().__init__()
        self.ln_1 = nn.LayerNorm(h)
        self.c_attn = nn.Linear(h, 3 * h)
        self.c_proj = nn.Linear(h, h)
        self.ln_2 = nn.LayerNorm(h)
        self.c_fc = nn.Linear(h, 4 * h)
        self.mlp_proj = nn.Linear(4 * h, h)
        self.attn_drop = nn.Dropout(p)
        self.resid_drop = nn.Dropout(p)
        self.heads = heads
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        b, t, h = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(h, dim=2)
        q = q.view(b, t, self.heads, h // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, h // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, h // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        att = self.attn_drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, h)
        x = x + self.resid_drop(self.c_proj(y))
        return x + self.resid_drop(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")))


class Gpt2(nn.Module):
    def __init__(self, layers=2, h=128, heads=4, vocab=1024, seq=128, p=0.1):
        super().__init__()
        self.wte = nn.Embedding(vocab, h)
        self.wpe = nn.Embedding(seq, h)
        self.drop = nn.Dropout(p)
        self.blocks = nn.ModuleList(Gpt2Block(h, heads, seq, p) for _ in range(layers))
        self.ln_f = nn.LayerNorm(h)
        self.lm_head = nn.Linear(h, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2's
        self.vocab, self.seq = vocab, seq

    def forward(self, ids, labels):
        pos = torch.arange(ids.size(1))
        x = self.drop(self.wte(ids) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))

    def batch(self, g, b):
        ids = torch.randint(self.vocab, (b, self.seq + 1), generator=g)
        return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


class BertLayer(nn.Module):
    """HuggingFace's BertLayer: post-LayerNorm, GELU (erf) MLP."""

    def __init__(self, h, heads, f, p):
        super().__init__()
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.attention_output = nn.Linear(h, h)
        self.attention_norm = nn.LayerNorm(h, eps=1e-12)
        self.intermediate = nn.Linear(h, f)
        self.output = nn.Linear(f, h)
        self.output_norm = nn.LayerNorm(h, eps=1e-12)
        self.drop = nn.Dropout(p)
        self.heads = heads

    def split(self, x):
        b, t, h = x.shape
        return x.view(b, t, self.heads, h // self.heads).transpose(1, 2)

    def forward(self, x):
        b, t, h = x.shape
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        att = self.drop(F.softmax(q @ k.transpose(-2, -1) / math.sqrt(h // self.heads), dim=-1))
        ctx = (att @ v).transpose(1, 2).contiguous().view(b, t, h)
        y = self.attention_norm(x + self.drop(self.attention_output(ctx)))
        return self.output_norm(y + self.drop(self.output(F.gelu(self.intermediate(y)))))


class Bert(nn.Module):
    """HuggingFace's BertModel (embeddings, layers, pooler) without the
    attention mask (no padding); as dtsim's bert-tiny has no task head, its
    objective is dtsim_worker's, the mean square of the pooled output."""

    def __init__(self, layers=2, h=128, heads=2, f=512, vocab=30522, seq=512, p=0.1):
        super().__init__()
        self.word = nn.Embedding(vocab, h)
        self.position = nn.Embedding(seq, h)
        self.token_type = nn.Embedding(2, h)
        self.norm = nn.LayerNorm(h, eps=1e-12)
        self.drop = nn.Dropout(p)
        self.layers = nn.ModuleList(BertLayer(h, heads, f, p) for _ in range(layers))
        self.pooler = nn.Linear(h, h)
        self.vocab, self.seq = vocab, seq

    def forward(self, ids, labels):
        pos = torch.arange(ids.size(1))
        x = self.drop(self.norm(self.word(ids) + self.position(pos) + self.token_type(torch.zeros_like(ids))))
        for layer in self.layers:
            x = layer(x)
        return torch.tanh(self.pooler(x[:, 0])).pow(2).mean()

    def batch(self, g, b):
        return torch.randint(self.vocab, (b, self.seq), generator=g), None


class BiLstm(nn.Module):
    """Seed 000's classifier: a 2-layer bidirectional LSTM over embeddings, the last step classified."""

    def __init__(self, inputs=64, hidden=64, layers=2, classes=33, seq=32):
        super().__init__()
        self.lstm = nn.LSTM(inputs, hidden, num_layers=layers, bidirectional=True, batch_first=True)
        self.classifier = nn.Linear(2 * hidden, classes)
        self.inputs, self.seq, self.classes = inputs, seq, classes

    def forward(self, x, labels):
        out, _ = self.lstm(x)
        return F.cross_entropy(self.classifier(out[:, -1]), labels)

    def batch(self, g, b):
        return torch.randn(b, self.seq, self.inputs, generator=g), torch.randint(self.classes, (b,), generator=g)


def init_weights(m):
    """HuggingFace's _init_weights for GPT-2 and BERT (initializer_range 0.02)."""
    if isinstance(m, (nn.Linear, nn.Embedding)):
        nn.init.normal_(m.weight, std=0.02)
    if isinstance(m, nn.Linear) and m.bias is not None:
        nn.init.zeros_(m.bias)


MODELS = {"gpt2-tiny": Gpt2, "bert-tiny": Bert, "bilstm-tiny": BiLstm}
PLANS = ("single", "ddp", "zero1")


def own_cores(rank, world):
    """This rank's equal share of the cores it may use, as dtsim_worker binds
    its ranks (Note [A rank's own cores] in platform/src/process.cpp)."""
    cores = sorted(os.sched_getaffinity(0))
    share = max(1, len(cores) // world)
    mine = cores[rank * share:(rank + 1) * share] or cores
    if os.environ.get("DTSIM_BIND") != "none":
        os.sched_setaffinity(0, mine)
    torch.set_num_threads(len(mine))


def launch(procs):
    """Starts `procs` copies of this script as ranks 0..procs-1 on this host
    and waits for them; a failed rank stops the others (nothing is left
    running). Returns the exit status."""
    # The ranks meet through a file, not a port found free: another socket
    # may take a port before rank 0 binds it (Note [Local rendezvous] in
    # runtime/src/launcher.cpp).
    tmp = tempfile.mkdtemp(prefix="dtsim-python-reference-")
    children = []
    try:
        for r in range(procs):
            env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(procs), LOCAL_WORLD_SIZE=str(procs),
                       MASTER_ADDR="127.0.0.1", DTSIM_RENDEZVOUS="file:" + os.path.join(tmp, "rendezvous"),
                       OMP_NUM_THREADS="1")
            env.pop("MASTER_PORT", None)
            children.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env=env))
        rc = 0
        while children and rc == 0:
            for c in list(children):
                if c.poll() is not None:
                    children.remove(c)
                    rc = rc or c.returncode
            time.sleep(0.05)
        return rc
    finally:
        for c in children:
            c.send_signal(signal.SIGTERM)
        for c in children:
            try:
                c.wait(5)
            except subprocess.TimeoutExpired:
                c.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, choices=sorted(MODELS))
    ap.add_argument("--plan", required=True, choices=PLANS)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=30, help="measured steps (default 30, as the suite's)")
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--procs", type=int, default=0, help="ranks to start on this host (default: 2 for ddp and zero1, 1 for single)")
    a = ap.parse_args()
    if "RANK" not in os.environ:
        procs = a.procs or (1 if a.plan == "single" else 2)
        if procs > 1:
            return launch(procs)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if a.plan != "single" and world < 2:
        sys.exit(f"python-reference: --plan {a.plan} needs --procs 2 or more; --plan single runs alone")
    if a.plan == "single" and world != 1:
        sys.exit("python-reference: --plan single runs in one process")
    own_cores(int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("LOCAL_WORLD_SIZE", "1")))

    torch.manual_seed(1234)
    model = MODELS[a.model]()
    if a.model != "bilstm-tiny":
        model.apply(init_weights)
    params = sum(p.numel() for p in model.parameters())
    if world > 1:
        rendezvous = os.environ.get("DTSIM_RENDEZVOUS", "")
        if rendezvous.startswith("file:"):  # as dtsim_worker reads it (Note [Rendezvous])
            dist.init_process_group("gloo", init_method="file://" + rendezvous[5:], rank=rank, world_size=world)
        else:
            dist.init_process_group("gloo")
        model = nn.parallel.DistributedDataParallel(model)  # bucket_cap_mb 25, as the plans' bucket_mb
    if a.plan == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-4)
    elif a.plan == "ddp":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    net = model.module if world > 1 else model

    g = torch.Generator().manual_seed(rank)
    batches = [net.batch(g, a.micro_batch) for _ in range(8)]
    times, losses = [], []
    for step in range(a.warmup + a.steps):
        x, y = batches[step % len(batches)]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if step >= a.warmup:
            times.append(dt)

    per_rank = [times]
    if world > 1:
        per_rank = [None] * world
        dist.all_gather_object(per_rank, times)
    if rank == 0:
        slowest = [max(r[i] for r in per_rank) for i in range(a.steps)]
        print(json.dumps({
            "version": 1, "model": a.model, "plan": a.plan, "procs": world, "micro_batch": a.micro_batch,
            "steps": a.steps, "parameters": params, "torch": torch.__version__, "threads": torch.get_num_threads(),
            "iteration_s": statistics.median(slowest), "min_s": min(slowest), "max_s": max(slowest),
            "rank_median_s": [statistics.median(r) for r in per_rank], "loss_first": losses[0], "loss_last": losses[-1],
        }))
    if world > 1:
        # LibTorch 1.13's Gloo group can spin at interpreter exit after
        # destroy_process_group (one rank at 100% for minutes here): meet,
        # flush and leave without the interpreter's teardown.
        dist.barrier()
        sys.stdout.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
