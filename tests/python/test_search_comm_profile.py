# search, comm and load_profile against the CLI's --json for the same inputs.
import glob
import os

import pytest

import dtsim


def without_timing(r):
    return {k: v for k, v in r.items() if k not in ("seconds", "threads")}


def test_search_equals_cli(cli):
    # One thread each: which plans the time bound skips depends on the order
    # threads finish in (Note [Search]), so on several the counts of pruned
    # and simulated plans may differ by one or two between runs.
    got = dtsim.search("gpt2", "dgx-a100", global_batch=64, top=3, set={"plan.precision": "bf16"}, threads=1)
    expected = cli("search", "--model", "gpt2", "--cluster", "dgx-a100", "--global-batch", "64", "--top", "3",
                   "--set", "plan.precision=bf16", "--threads", "1")
    assert without_timing(got) == without_timing(expected)
    assert len(got["top"]) == 3


def test_search_from_a_framework_config(cli):
    # Note [Search from a framework config]: the config's model, batch and
    # numerics, its own plan ranked beside the search's, as the CLI does.
    mb = os.path.join(os.environ["DTSIM_SOURCE_DIR"], "configs", "frameworks", "megatron-bridge", "llama3_8b_run_config.yaml")
    got = dtsim.search(None, "dgx-h100", top=3, threads=1, megatron_bridge=mb)
    expected = cli("search", "--cluster", "dgx-h100", "--top", "3", "--threads", "1", "--megatron-bridge", mb)
    assert without_timing(got) == without_timing(expected)
    assert got["global_batch"] == 512  # train.global_batch_size
    assert got["compared"]["name"] == mb + " (Megatron-Bridge)"
    assert got["compared"]["entry"]["plan"]["cp"] == 2
    with pytest.raises(dtsim.ConfigError, match="^deepspeed, megatron_args, megatron_bridge, torchtitan, torchtune, axolotl, llamafactory, trl and nanotron"):
        dtsim.search(None, "dgx-h100", megatron_bridge=mb, megatron_args="--micro-batch-size 1")


def test_search_frame():
    pd = pytest.importorskip("pandas")
    df = dtsim.search_frame("gpt2", "dgx-a100", global_batch=64, top=4)
    assert isinstance(df, pd.DataFrame)
    assert len(df) == 4
    assert list(df["rank"]) == [1, 2, 3, 4]
    assert df["iteration_time_s"].is_monotonic_increasing  # fastest first
    assert {"dp", "tp", "pp", "zero_stage", "peak_bytes"} <= set(df.columns)
    assert df.attrs["search"]["global_batch"] == 64
    assert isinstance(dtsim.search("gpt2", "dgx-a100", global_batch=64, top=2, frame=True), pd.DataFrame)


def test_comm_equals_cli(cli):
    got = dtsim.comm("dgx-a100", op="all_gather", ranks=8, max_bytes=1 << 20)
    assert got == cli("comm", "--cluster", "dgx-a100", "--op", "all_gather", "--ranks", "8", "--max-bytes", str(1 << 20))
    with pytest.raises(dtsim.ConfigError, match=r"^op=all_redcue: unknown collective \(did you mean 'all_reduce'\?\)"):
        dtsim.comm("dgx-a100", op="all_redcue")


def test_comm_ring_step():
    # Note [A ring step]: a cp ring step over 8 GPUs of a node costs one
    # pair's transfer; one rank has no peer; ranks must fit the cluster's nodes.
    ring = dtsim.comm("dgx-h100", op="send_recv", ranks=8, min_bytes=1 << 30, max_bytes=1 << 30)
    pair = dtsim.comm("dgx-h100", op="send_recv", ranks=2, min_bytes=1 << 30, max_bytes=1 << 30)
    assert ring["rows"][0]["time_us"] == pair["rows"][0]["time_us"]
    with pytest.raises(dtsim.ConfigError, match=r"^ranks=1: send_recv needs a peer; valid: 2 or more$"):
        dtsim.comm("dgx-h100", op="send_recv", ranks=1)
    with pytest.raises(dtsim.ConfigError, match=r"^ranks=16: 16 ranks, 1 a node, span 16 nodes; dgx-h100 has 2$"):
        dtsim.comm("dgx-h100", op="send_recv", ranks=16, ranks_per_node=1, set={"cluster.nodes": 2})


def test_load_profile_equals_cli(cli, source_dir):
    profiles = sorted(glob.glob(os.path.join(source_dir, "configs", "profiles", "*.h5")))
    assert profiles
    for path in profiles:
        assert dtsim.load_profile(path) == cli("profile", "show", path)
    missing = os.path.join(source_dir, "configs", "profiles", "missing.h5")
    with pytest.raises(dtsim.ConfigError, match="^" + missing + ": no such profile"):
        dtsim.load_profile(missing)


def test_comm_with_profile_equals_cli(cli, source_dir):
    # local-cpu-moe.h5 measured Gloo's all_to_all over 2 ranks: both price
    # from its measured sizes and name its fit in cost_source.
    profile = os.path.join(source_dir, "configs", "profiles", "local-cpu-moe.h5")
    got = dtsim.comm("local-cpu", op="all_to_all", ranks=2, max_bytes=1 << 20, profile=profile)
    assert got == cli("comm", "--cluster", "local-cpu", "--op", "all_to_all", "--ranks", "2", "--max-bytes", str(1 << 20),
                      "--profile", profile)
    assert "all_to_all over 2 ranks measured at " in got["cost_source"]
    assert "priced between them (fit comm.gloo.all_to_all.2 t = " in got["cost_source"]
    assert got != dtsim.comm("local-cpu", op="all_to_all", ranks=2, max_bytes=1 << 20)
