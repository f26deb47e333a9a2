"""model.yaml ``parameters`` of ``runtime: vllm`` -> vLLM's engine arguments (its own names)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rosettaserve.core.generate import Fields
from rosettaserve.repository.config import ConfigError

DTYPES = ("auto", "float32", "float16", "bfloat16")
# parameters read here, not handed to vLLM as engine arguments
OWN = ("path", "task", "max_waiting", "max_n", "engine_args")
MAX_WAITING, MAX_N = 64, 8


def model_folder(params: Fields, version_folder: Path) -> Path:
    folder = Path(params.string("path") or version_folder)
    if not (folder / "config.json").is_file():
        raise ConfigError(f"{folder} holds no transformers model (config.json is missing)")
    return folder


def engine_kwargs(
    name: str, params: Fields, folder: Path, sleep_mode: bool = False
) -> dict[str, Any]:
    """``AsyncEngineArgs`` keyword arguments: the declared parameters, then ``engine_args``
    (any other engine argument, as vLLM spells it, over the defaults set here). ``sleep_mode``:
    vLLM's platform has sleep mode, so the engine is built able to sleep when idle (sleep.py)."""
    dtype = params.string("dtype") or "float32"
    if dtype not in DTYPES:
        raise ConfigError(f"parameters.dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    kwargs: dict[str, Any] = {
        "model": str(folder),
        "tokenizer": str(folder),
        "served_model_name": name,
        "dtype": dtype,
        "seed": params.integer("seed", 0, 0) or 0,
        "disable_log_stats": True,
        # vLLM's default, "fcfs", ignores a request's priority; "priority" orders its queue by
        # it, then by arrival: with equal priorities that is fcfs's order (engine_args may set
        # "fcfs": a non-zero priority is then refused, engine.py)
        "scheduling_policy": "priority",
    }
    if sleep_mode:  # any version may go idle (unload_after_idle, Ollama's keep_alive)
        kwargs["enable_sleep_mode"] = True
    optional = {
        "max_model_len": params.integer("max_model_len", None, 2),
        "max_num_seqs": params.integer("max_num_seqs", None, 1, 4096),
        "max_num_batched_tokens": params.integer("max_num_batched_tokens", None, 1),
        "kv_cache_memory_bytes": params.integer("kv_cache_memory_bytes", None, 1),
        "gpu_memory_utilization": params.number("gpu_memory_utilization", None, 0.0, 1.0, True),
        "block_size": params.integer("block_size", None, 1),
        "max_logprobs": params.integer("max_logprobs", None, 0),
    }
    for flag in ("enable_prefix_caching", "enable_chunked_prefill", "enforce_eager"):
        if params.has(flag):
            optional[flag] = params.boolean(flag, False)
    kwargs |= {key: value for key, value in optional.items() if value is not None}
    extra = params.object("engine_args").doc
    return kwargs | dict(extra)
