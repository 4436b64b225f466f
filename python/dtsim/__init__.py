"""dtsim: predict the time and memory of a distributed training plan.

The same simulator as the ``dtsim`` command line, from Python::

    import dtsim
    p = dtsim.predict("gpt2-xl", "dgx-a100", "zero2")
    p["iteration_time_ms"], p["memory"]["fits"]

Every result is the dict ``dtsim <command> --json`` prints for the same
inputs (the C++ core writes the JSON; this package parses it). Bad input
raises :class:`ConfigError` (a ``ValueError``) with the CLI's one-line message.
"""

import json as _json
import os as _os
import warnings as _warnings

from . import _core
from ._core import CalibrationError, ConfigError, IoError, UnsupportedError

__all__ = [
    "ConfigError", "IoError", "UnsupportedError", "CalibrationError",
    "predict", "search", "search_frame", "comm", "load_profile",
    "models", "clusters", "plans", "config_dir", "__version__",
]

for _e in (ConfigError, IoError, UnsupportedError, CalibrationError):
    _e.__module__ = __name__

__version__ = _core.version()


def _source(value, what):
    """A name or path (str, os.PathLike) as is; a dict as inline JSON."""
    if isinstance(value, dict):
        return _core.Source(_json.dumps(value), True)
    if isinstance(value, (str, _os.PathLike)):
        text = _os.fspath(value)
        if not text:
            raise ConfigError(f"{what}: empty; give a built-in name, a file path or a dict")
        return _core.Source(text, False)
    raise ConfigError(f"{what}: expected a name, a path or a dict, got {type(value).__name__}")


def _value(v):
    """A --set value as YAML text: strings as given, the rest as JSON (true, 8, [30, 18])."""
    return v if isinstance(v, str) else _json.dumps(v)


def _sets(overrides):
    """``{"plan.tp": 8}`` or ``["plan.tp=8"]`` (or one "k=v" string) as the CLI's --set texts."""
    if overrides is None:
        return []
    if isinstance(overrides, str):
        return [overrides]
    if isinstance(overrides, dict):
        return [f"{k}={_value(v)}" for k, v in overrides.items()]
    if isinstance(overrides, (list, tuple)):
        for s in overrides:
            if not isinstance(s, str):
                raise ConfigError(f"set: expected 'section.key=value' strings, got {type(s).__name__}")
        return list(overrides)
    raise ConfigError(f"set: expected a dict or a list of 'section.key=value', got {type(overrides).__name__}")


def _path(value, what):
    if value is None:
        return ""
    if isinstance(value, (str, _os.PathLike)):
        return _os.fspath(value)
    raise ConfigError(f"{what}: expected a file path, got {type(value).__name__}")


def _int(value, what, default):
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{what}={value!r}: expected an integer")
    return value


def _framework(deepspeed, megatron_args, megatron_bridge, torchtitan, torchtune=None, axolotl=None, llamafactory=None, trl=None,
               nanotron=None):
    """(kind, source) of the one framework config given, or ("", "")."""
    options = {"deepspeed": "deepspeed", "megatron": "megatron_args", "megatron-bridge": "megatron_bridge",
               "torchtitan": "torchtitan", "torchtune": "torchtune", "axolotl": "axolotl",
               "llamafactory": "llamafactory", "trl": "trl", "nanotron": "nanotron"}
    frameworks = [(k, v) for k, v in (("deepspeed", deepspeed), ("megatron", megatron_args),
                                      ("megatron-bridge", megatron_bridge), ("torchtitan", torchtitan),
                                      ("torchtune", torchtune), ("axolotl", axolotl),
                                      ("llamafactory", llamafactory), ("trl", trl), ("nanotron", nanotron))
                  if v is not None]
    if len(frameworks) > 1:
        raise ConfigError("deepspeed, megatron_args, megatron_bridge, torchtitan, torchtune, axolotl, llamafactory, trl and nanotron each "
                          "describe the whole plan; give one")
    kind, source = frameworks[0] if frameworks else ("", "")
    if kind:
        source = _path(source, options[kind])
        if not source:
            raise ConfigError(f"{options[kind]}: empty; give a file path")
    return kind, source


def _accelerate(accelerate):
    """An accelerate config's path, or "" where none is given."""
    path = _path(accelerate, "accelerate")
    if accelerate is not None and not path:
        raise ConfigError("accelerate: empty; give a file path")
    return path


def predict(model, cluster, plan=None, set=None, profile=None, unabridged=False, deepspeed=None, megatron_args=None,
            torchtitan=None, megatron_bridge=None, torchtune=None, axolotl=None, llamafactory=None, accelerate=None, trl=None,
            nanotron=None):
    """One plan's iteration time, throughput, MFU and per-GPU memory.

    model: a built-in name (``dtsim.models()``), a YAML or HuggingFace
    config.json path, or a dict (transformers-style with ``model_type``, or
    dtsim's YAML keys with ``family``); None where ``megatron_args``,
    ``megatron_bridge`` or ``torchtitan`` names one. cluster, plan: a shipped name
    (``dtsim.clusters()``, ``dtsim.plans()``), a YAML path or a dict of its
    keys; plan None: ``ddp``. set: ``{"plan.tp": 8}`` or ``["plan.tp=8"]``,
    as ``--set`` (it wins over a framework's config). profile: a calibration
    profile (.h5). deepspeed: a DeepSpeed config JSON (a path) as the plan;
    megatron_args: Megatron-LM's flags (a string, or a file of them);
    megatron_bridge, torchtitan, torchtune, axolotl, llamafactory, trl,
    nanotron: a Megatron-Bridge config YAML (run_config.yaml), a torchtitan
    job TOML, a torchtune recipe config, an axolotl config, a LLaMA-Factory
    training config, a TRL config or a nanotron config YAML (a path); the
    last eight as the plan and, with no model, the model; at most one,
    instead of plan, as the CLI's ``--deepspeed``, ``--megatron-args``,
    ``--megatron-bridge``, ``--torchtitan``, ``--torchtune``, ``--axolotl``,
    ``--llamafactory``, ``--trl`` and ``--nanotron``. accelerate: an accelerate config YAML (a path) as
    ``--accelerate``: the distribution ``accelerate launch --config_file``
    gives, alone or under llamafactory, axolotl or trl. What such a config sets that
    dtsim does not model is one ``UserWarning``. Returns ``dtsim predict --json``.
    """
    kind, source = _framework(deepspeed, megatron_args, megatron_bridge, torchtitan, torchtune, axolotl, llamafactory, trl, nanotron)
    accelerate = _accelerate(accelerate)
    text, warning = _core.predict_json(_source(model, "model") if model is not None else _core.Source("", False),
                                       _source(cluster, "cluster"),
                                       _source(plan, "plan") if plan is not None else _core.Source("", False),
                                       _sets(set), _path(profile, "profile"), bool(unabridged), kind, source, accelerate)
    if warning:
        _warnings.warn(warning, stacklevel=2)
    return _json.loads(text)


def search(model, cluster, global_batch=None, gpus=None, top=10, set=None, profile=None, threads=None,
           frame=False, deepspeed=None, megatron_args=None, megatron_bridge=None, torchtitan=None, torchtune=None,
           axolotl=None, llamafactory=None, accelerate=None, trl=None, nanotron=None):
    """Every valid plan simulated and ranked; ``dtsim search --json``.

    global_batch: sequences per iteration (default 4 per GPU); gpus: GPUs to
    use (default the whole cluster); top: plans ranked; set: fixed knobs
    (``{"plan.precision": "bf16"}``). deepspeed, megatron_args,
    megatron_bridge, torchtitan, torchtune, axolotl, llamafactory, trl, nanotron (at most one, as for :func:`predict`; accelerate as there): the
    model (where model is None), the global batch, the sequence and the
    numerics come from that config, and its own plan is ranked beside the
    search's (``result["compared"]``); what it sets that dtsim does not model
    is one ``UserWarning``. frame=True returns the ranking as a pandas
    DataFrame (:func:`search_frame`).
    """
    kind, source = _framework(deepspeed, megatron_args, megatron_bridge, torchtitan, torchtune, axolotl, llamafactory, trl, nanotron)
    accelerate = _accelerate(accelerate)
    text, warning = _core.search_json(_source(model, "model") if model is not None else _core.Source("", False),
                                      _source(cluster, "cluster"), _sets(set),
                                      _int(gpus, "gpus", 0), _int(global_batch, "global_batch", 0), _int(top, "top", 10),
                                      _int(threads, "threads", 0), _path(profile, "profile"), kind, source, accelerate)
    if warning:
        _warnings.warn(warning, stacklevel=2)
    result = _json.loads(text)
    return _frame(result) if frame else result


def _frame(result):
    try:
        import pandas as pd
    except ImportError as e:
        raise ImportError("dtsim.search(frame=True) needs pandas (Debian: python3-pandas)") from e
    rows = []
    for rank, entry in enumerate(result.get("top", []), start=1):
        row = {"rank": rank}
        for key, value in entry.items():
            if isinstance(value, dict):
                for k, v in value.items():
                    row[k if k not in entry else f"{key}.{k}"] = v
            else:
                row[key] = value
        rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs["search"] = {k: v for k, v in result.items() if k not in ("top", "pareto")}
    return df


def search_frame(model, cluster, **kwargs):
    """:func:`search`'s ranking as a pandas DataFrame, one row a plan (its
    plan keys flattened into columns), fastest first; the search's summary
    (enumerated, pruned, simulated ...) in ``df.attrs["search"]``."""
    return search(model, cluster, frame=True, **kwargs)


def comm(cluster, op="all_reduce", ranks=None, ranks_per_node=None, min_bytes=8, max_bytes=1 << 30, set=None, profile=None):
    """Predicted time, algbw and busbw of a collective for sizes from min_bytes
    to max_bytes (x2), as ``dtsim comm --json``. ranks: default the whole
    cluster; ranks_per_node: default a node's worth; profile: price from a
    calibration profile's measurements (its ``cost_source`` says which), as
    ``--profile``; where the profile saw slow runs, a row's ``time_us`` is
    the typical time and ``stalls`` x ``stall_us`` what it adds on average
    (Note [A collective's stalls], docs/json.md)."""
    text = _core.comm_json(_source(cluster, "cluster"), op, _int(ranks, "ranks", -1),
                           _int(ranks_per_node, "ranks_per_node", -1), _int(min_bytes, "min_bytes", 8),
                           _int(max_bytes, "max_bytes", 1 << 30), _sets(set), _path(profile, "profile"))
    return _json.loads(text)


def load_profile(path):
    """A calibration profile's provenance, ranges and fits, as ``dtsim profile show --json``."""
    return _json.loads(_core.profile_json(_path(path, "profile")))


def models():
    """Built-in model names, then the YAML models shipped in configs/models (as paths)."""
    return [name for name, _ in _core.list_models()]


def clusters():
    """Shipped cluster names."""
    return _core.list_configs("clusters")


def plans():
    """Shipped plan names."""
    return _core.list_configs("plans")


def config_dir():
    """Where the shipped configs were found ($DTSIM_CONFIG_DIR overrides)."""
    return _core.config_dir()
