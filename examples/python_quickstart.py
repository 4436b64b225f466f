# dtsim from Python: a notebook-style walkthrough (each "# %%" is a cell;
# VS Code and Jupytext open it as a notebook). Run it whole with
#   PYTHONPATH=build/python python3 examples/python_quickstart.py
# (or after `pip install .`); tests/python/test_quickstart.py runs it.

# %% What is there
import dtsim

print("dtsim", dtsim.__version__, "configs in", dtsim.config_dir())
print("clusters:", ", ".join(dtsim.clusters()))
print("plans:", ", ".join(dtsim.plans()))

# %% One prediction: GPT-2 XL on a DGX A100 with ZeRO-2
p = dtsim.predict("gpt2-xl", "dgx-a100", "zero2")
print(f"{p['model']['name']} on {p['cluster']['gpus']} x {p['cluster']['device']}: "
      f"{p['iteration_time_s'] * 1e3:.1f} ms per iteration, MFU {p['mfu']:.0%}")

# %% The same with a knob turned, as --set does
p2 = dtsim.predict("gpt2-xl", "dgx-a100", "zero2", set={"plan.micro_batch": 4, "plan.recompute": "full"})
print(f"micro_batch 4, full recompute: {p2['iteration_time_s'] * 1e3:.1f} ms")

# %% A model of your own, as transformers' config would give it
tiny_llama = {"model_type": "llama", "_name_or_path": "my-llama", "hidden_size": 1024, "intermediate_size": 2816,
              "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000,
              "max_position_embeddings": 2048}
p3 = dtsim.predict(tiny_llama, "dgx-a100", "fsdp")
print(f"{p3['model']['name']}: {p3['model']['parameters'] / 1e6:.0f} M parameters, "
      f"{p3['iteration_time_s'] * 1e3:.1f} ms")

# %% The configs you already have: a DeepSpeed JSON, Megatron-LM's flags, a torchtitan TOML
import os
import warnings

frameworks = os.path.join(dtsim.config_dir(), "frameworks")
with warnings.catch_warnings(record=True) as unmodelled:  # what dtsim does not model: one warning
    warnings.simplefilter("always")
    ds = dtsim.predict("llama-3-8b", "dgx-h100", deepspeed=os.path.join(frameworks, "deepspeed", "zero3.json"),
                       set={"plan.seq_len": 2048})
print(f"DeepSpeed ZeRO-{ds['plan']['zero_stage']}: {ds['iteration_time_s'] * 1e3:.0f} ms;",
      "; ".join(str(w.message) for w in unmodelled))
mg = dtsim.predict("gpt2-large", "dgx-a100", megatron_args="--tensor-model-parallel-size 2 --micro-batch-size 2 "
                                                         "--global-batch-size 64 --bf16")
print(f"Megatron tp {mg['plan']['tp']}: {mg['iteration_time_s'] * 1e3:.1f} ms")

# %% A collective, priced from a calibration profile's fit where it has one
profile = os.path.join(dtsim.config_dir(), "profiles", "local-cpu-moe.h5")
rows = dtsim.comm("local-cpu", op="all_to_all", ranks=2, max_bytes=1 << 20, profile=profile)
print(rows["cost_source"])

# %% Search the plans; a DataFrame where pandas is installed
try:
    df = dtsim.search_frame("gpt2-xl", "dgx-a100", global_batch=64, top=5)
    print(df[["rank", "iteration_time_s", "dp", "tp", "pp", "zero_stage", "micro_batch"]].to_string(index=False))
except ImportError:
    best = dtsim.search("gpt2-xl", "dgx-a100", global_batch=64, top=5)["top"][0]
    print("fastest:", best)

# %% Bad input is a ValueError with the CLI's one-line message
try:
    dtsim.predict("gpt2", "dgx-a100", "ddp", set={"plan.zero_stage": 4})
except dtsim.ConfigError as e:
    print("refused:", e)
