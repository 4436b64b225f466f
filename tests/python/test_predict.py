# The Python module against the CLI: the same scenario gives the same dict
# (both are the JSON of sim::to_json; the module adds nothing of its own).
import os
import warnings

import pytest

import dtsim


def test_gpt2_ddp_equals_cli(cli):
    assert dtsim.predict("gpt2", "dgx-a100", "ddp") == cli("predict", "--model", "gpt2", "--cluster", "dgx-a100",
                                                           "--plan", "ddp")


def test_llama_fsdp_with_set_equals_cli(cli):
    # set as a dict (values rendered as YAML: 2, 2) and as "k=v" strings: one scenario.
    expected = cli("predict", "--model", "llama-3-8b", "--cluster", "dgx-a100", "--plan", "fsdp",
                   "--set", "plan.micro_batch=2", "--set", "cluster.nodes=2")
    assert dtsim.predict("llama-3-8b", "dgx-a100", "fsdp", set={"plan.micro_batch": 2, "cluster.nodes": 2}) == expected
    assert dtsim.predict("llama-3-8b", "dgx-a100", "fsdp", set=["plan.micro_batch=2", "cluster.nodes=2"]) == expected
    assert expected["cluster"]["gpus"] == 16  # two DGX A100 nodes of 8


def test_plan_path_and_profile_equal_cli(cli, source_dir):
    plan = os.path.join(source_dir, "configs", "plans", "zero2.yaml")
    profile = os.path.join(source_dir, "configs", "profiles", "local-cpu-tiny.h5")
    expected = cli("predict", "--model", "gpt2-tiny", "--cluster", "local-cpu", "--plan", plan, "--profile", profile)
    assert dtsim.predict("gpt2-tiny", "local-cpu", plan, profile=profile) == expected


def test_dict_model_equals_builtin():
    # GPT-2 small as transformers' GPT2Config writes it (n_layer 12, n_embd
    # 768, n_head 12, vocab 50257, n_positions 1024), named by _name_or_path
    # as a config.json is: the built-in gpt2 is that model.
    hf = {"model_type": "gpt2", "_name_or_path": "gpt2", "architectures": ["GPT2LMHeadModel"],
          "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}
    got = dtsim.predict(hf, "dgx-a100", "zero2")
    assert got == dtsim.predict("gpt2", "dgx-a100", "zero2")
    assert got["model"]["parameters"] == 124439808  # HF's GPT-2 small (tied head)


def test_dict_model_in_our_yaml_keys():
    ours = {"family": "llama", "name": "llama-tiny-dict", "layers": 2, "hidden": 64, "heads": 4, "intermediate": 128,
            "vocab": 256, "seq_len": 64}
    p = dtsim.predict(ours, "local-cpu", "single")
    assert p["model"]["name"] == "llama-tiny-dict"
    assert p["model"]["layers"] == 2


def test_plan_dict_equals_the_shipped_plan(cli):
    # configs/plans/zero1.yaml's keys as a dict: the same plan as the CLI's --plan zero1.
    zero1 = {"name": "zero1", "micro_batch": 4, "grad_accum": 1, "precision": "fp16", "optimizer": "adam",
             "zero_stage": 1, "bucket_mb": 25}
    by_dict = dtsim.predict("gpt2-medium", "dgx-a100", zero1)
    by_cli = cli("predict", "--model", "gpt2-medium", "--cluster", "dgx-a100", "--plan", "zero1")
    assert by_dict["plan"]["zero_stage"] == 1
    for key in ("iteration_time_s", "time_breakdown_s", "memory", "model", "cluster"):
        assert by_dict[key] == by_cli[key], key
    # A key changed in the dict is the same as --set changing it.
    assert dtsim.predict("gpt2-medium", "dgx-a100", dict(zero1, micro_batch=8))["iteration_time_s"] == \
        cli("predict", "--model", "gpt2-medium", "--cluster", "dgx-a100", "--plan", "zero1",
            "--set", "plan.micro_batch=8")["iteration_time_s"]


def test_bad_input_raises_config_error_with_the_line():
    with pytest.raises(dtsim.ConfigError) as e:
        dtsim.predict("gpt2", "dgx-a100", "ddp", set={"plan.zero_stage": 4})
    assert isinstance(e.value, ValueError)
    assert str(e.value) == "--set plan.zero_stage: 4 is not one of 0, 1, 2, 3"
    with pytest.raises(dtsim.ConfigError, match=r"^--model gpt3: unknown model \(did you mean 'gpt2'\?\)"):
        dtsim.predict("gpt3", "dgx-a100")
    with pytest.raises(dtsim.ConfigError, match=r"^--plan zer2: unknown plan \(did you mean 'zero2'\?\)"):
        dtsim.predict("gpt2", "dgx-a100", "zer2")
    with pytest.raises(dtsim.IoError, match=r"^missing\.yaml: no such file$"):
        dtsim.predict("gpt2", "missing.yaml")
    with pytest.raises(dtsim.ConfigError, match=r"^<model dict>.*model_type"):
        dtsim.predict({"model_type": "t5"}, "dgx-a100")
    with pytest.raises(dtsim.ConfigError, match="set: expected"):
        dtsim.predict("gpt2", "dgx-a100", set=42)


def test_lists():
    assert "gpt2" in dtsim.models() and "llama-3-8b" in dtsim.models()
    assert "dgx-a100" in dtsim.clusters()
    assert {"ddp", "fsdp", "zero2"} <= set(dtsim.plans())
    assert os.path.isdir(os.path.join(dtsim.config_dir(), "clusters"))


def test_framework_configs_equal_cli(cli, source_dir, tmp_path):
    # The CLI's --deepspeed, --torchtitan and --megatron-args, as keywords;
    # what a config sets that dtsim does not model is one UserWarning.
    frameworks = os.path.join(source_dir, "configs", "frameworks")
    ds = os.path.join(frameworks, "deepspeed", "zero3.json")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every key of zero3.json is modelled
        got = dtsim.predict("llama-3-8b", "dgx-h100", deepspeed=ds, set={"plan.seq_len": 2048})
    assert got == cli("predict", "--model", "llama-3-8b", "--cluster", "dgx-h100", "--deepspeed", ds,
                      "--set", "plan.seq_len=2048")
    assert got["plan"]["zero_stage"] == 3
    assert got["plan"]["stage3_param_persistence_threshold"] == 1000000
    # HuggingFace's "auto" for a ZeRO-3 knob is not resolved: said, not dropped.
    with open(ds) as f:
        text = f.read().replace('"stage3_prefetch_bucket_size": 5e7', '"stage3_prefetch_bucket_size": "auto"')
    auto = tmp_path / "auto.json"
    auto.write_text(text)
    with pytest.warns(UserWarning, match="auto.json: DeepSpeed settings dtsim does not model, ignored: zero_optimization.stage3_prefetch_bucket_size=auto"):
        dtsim.predict("llama-3-8b", "dgx-h100", deepspeed=str(auto), set={"plan.seq_len": 2048})
    tt = os.path.join(frameworks, "torchtitan", "llama3_8b.toml")
    assert dtsim.predict(None, "dgx-h100", torchtitan=tt) == cli("predict", "--cluster", "dgx-h100", "--torchtitan", tt)
    # Megatron-Bridge's run_config.yaml names the plan and the model, as --megatron-bridge.
    mb = os.path.join(frameworks, "megatron-bridge", "llama3_8b_run_config.yaml")
    got = dtsim.predict(None, "dgx-h100", megatron_bridge=mb)
    assert got == cli("predict", "--cluster", "dgx-h100", "--megatron-bridge", mb)
    # The recipe: cp 2 on 8 GPUs leaves dp 4; 512 sequences of 1 in 4 ranks: 128 micro-steps.
    assert (got["plan"]["cp"], got["plan"]["dp"], got["plan"]["grad_accum"]) == (2, 4, 128)
    with pytest.raises(dtsim.ConfigError, match="^plan and megatron_bridge both describe the plan"):
        dtsim.predict(None, "dgx-h100", "ddp", megatron_bridge=mb)
    # A torchtune recipe config: its LoRA builder, batch and FSDP2, as --torchtune.
    tu = os.path.join(frameworks, "torchtune", "llama3_1_70B_lora.yaml")
    with pytest.warns(UserWarning, match="dataset.packed=True"):
        got = dtsim.predict(None, "dgx-a100", torchtune=tu)
    assert got == cli("predict", "--cluster", "dgx-a100", "--torchtune", tu)
    assert (got["plan"]["dp"], got["plan"]["micro_batch"], got["plan"]["fsdp"]) == (8, 2, "full_shard")
    assert got["model"]["trainable_parameters"] == 80 * 16 * (8192 + 8192 + 2 * (8192 + 1024))
    # An axolotl config: its hub id as a built-in, the adapter and the batch, as --axolotl.
    ax = os.path.join(frameworks, "axolotl", "llama-3.1-8b-lora.yml")
    with pytest.warns(UserWarning, match="sample_packing=true"):
        got = dtsim.predict(None, "dgx-a100", axolotl=ax)
    assert got == cli("predict", "--cluster", "dgx-a100", "--axolotl", ax)
    assert (got["plan"]["dp"], got["plan"]["micro_batch"], got["plan"]["grad_accum"]) == (8, 2, 4)
    # Rank 32 on the seven linears of each of 32 blocks (Llama 3.1 8B).
    assert got["model"]["trainable_parameters"] == 32 * 32 * (2 * (4096 + 4096) + 2 * (4096 + 1024) + 3 * (4096 + 14336))
    # A LLaMA-Factory config: LoRA rank 8 on all seven linears of Qwen3 4B
    # (hidden 2560, q 4096, k and v 1024, MLP 9728; 36 blocks), as --llamafactory.
    lf = os.path.join(frameworks, "llamafactory", "qwen3_lora_sft.yaml")
    with pytest.warns(UserWarning, match="packing unset"):
        got = dtsim.predict(None, "dgx-h100", llamafactory=lf)
    assert got == cli("predict", "--cluster", "dgx-h100", "--llamafactory", lf)
    assert (got["plan"]["dp"], got["plan"]["micro_batch"], got["plan"]["grad_accum"]) == (8, 1, 8)
    assert got["model"]["trainable_parameters"] == 36 * 8 * (2 * (2560 + 4096) + 2 * (2560 + 1024) + 3 * (2560 + 9728))
    # Under accelerate's FSDP config, as --accelerate.
    acc = os.path.join(frameworks, "llamafactory", "fsdp_config.yaml")
    with pytest.warns(UserWarning, match="fsdp_version=1 with an adapter"):
        got = dtsim.predict(None, "dgx-h100", llamafactory=lf, accelerate=acc)
    assert got == cli("predict", "--cluster", "dgx-h100", "--accelerate", acc, "--llamafactory", lf)
    assert (got["plan"]["fsdp"], got["plan"]["fsdp_version"], got["plan"]["dp"]) == ("full_shard", 2, 8)
    with pytest.raises(dtsim.ConfigError, match="^accelerate: empty; give a file path"):
        dtsim.predict(None, "dgx-h100", llamafactory=lf, accelerate="")
    # A TRL config: LoRA rank 32 on all seven linears of Qwen3 8B (hidden
    # 4096, q 4096, k and v 1024, MLP 12288; 36 blocks) over its float32
    # base, as --trl; under accelerate's DeepSpeed ZeRO-2 the base is cast to 16 bits.
    trl = os.path.join(frameworks, "trl", "qwen3_8b_lora_sft.yaml")
    got = dtsim.predict(None, "dgx-h100", trl=trl)
    assert got == cli("predict", "--cluster", "dgx-h100", "--trl", trl)
    assert (got["plan"]["dp"], got["plan"]["micro_batch"], got["plan"]["grad_accum"]) == (8, 4, 4)
    assert got["plan"]["loss_kernel"] == "chunked_nll"
    assert got["model"]["trainable_parameters"] == 36 * 32 * (2 * (4096 + 4096) + 2 * (4096 + 1024) + 3 * (4096 + 12288))
    assert got["model"]["name"] == "qwen3-8b+lora32-fp32"
    zero2 = os.path.join(frameworks, "trl", "zero2.yaml")
    got = dtsim.predict(None, "dgx-h100", trl=trl, accelerate=zero2)
    assert got == cli("predict", "--cluster", "dgx-h100", "--accelerate", zero2, "--trl", trl)
    assert (got["plan"]["zero_stage"], got["model"]["name"]) == (2, "qwen3-8b+lora32")
    assert got["plan"]["loss_kernel"] == "chunked_nll_fp32"
    flags = "--tensor-model-parallel-size 2 --micro-batch-size 2 --global-batch-size 64 --bf16"
    got = dtsim.predict("gpt2-large", "dgx-a100", megatron_args=flags)
    assert got == cli("predict", "--model", "gpt2-large", "--cluster", "dgx-a100", "--megatron-args", flags)
    assert (got["plan"]["tp"], got["plan"]["micro_batch"], got["plan"]["global_batch"]) == (2, 2, 64)
    with pytest.raises(dtsim.ConfigError, match="^plan and deepspeed both describe the plan"):
        dtsim.predict("gpt2", "dgx-a100", "zero2", deepspeed=ds)
    # A nanotron config: the SmolLM3-3B example over tp 2 x dp 4, as --nanotron.
    nt = os.path.join(frameworks, "nanotron", "smollm3_3b.yaml")
    got = dtsim.predict(None, "dgx-h100", nanotron=nt)
    assert got == cli("predict", "--cluster", "dgx-h100", "--nanotron", nt)
    assert (got["plan"]["dp"], got["plan"]["tp"], got["plan"]["fp32_grad_accumulator"]) == (4, 2, True)
    with pytest.raises(dtsim.ConfigError, match="^deepspeed, megatron_args, megatron_bridge, torchtitan, torchtune, axolotl, llamafactory, trl and nanotron each"):
        dtsim.predict("gpt2", "dgx-a100", deepspeed=ds, torchtitan=tt)
    with pytest.raises(dtsim.ConfigError, match="^model: none given"):
        dtsim.predict(None, "dgx-a100", "ddp")
