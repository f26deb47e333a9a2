"""model.yaml: parsed once into a typed object, with errors a person can act on."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rosettaserve.core.registry import DynamicBatching, SequenceBatching
from rosettaserve.core.types import TensorSpec
from rosettaserve.repository import declare
from rosettaserve.repository.model_yaml import DYNAMIC_BATCHING, MODEL_YAML, check_parameters
from rosettaserve.repository.sequence_config import sequence_batching
from rosettaserve.repository.warmup import WarmupSample, samples

CONFIG_FILE = "model.yaml"


class ConfigError(Exception):
    """model.yaml is missing, unreadable or says something we cannot serve."""


@dataclass(frozen=True)
class VersionPolicy:
    latest: int | None = 1
    all: bool = False
    specific: tuple[int, ...] = ()

    def select(self, versions: list[int]) -> list[int]:
        """The versions this policy serves, oldest first."""
        ordered = sorted(versions)
        if self.all:
            return ordered
        if self.specific:
            return [v for v in ordered if v in self.specific]
        return ordered[-(self.latest or 1) :]


@dataclass(frozen=True)
class ModelConfig:
    """A checked model.yaml (model_yaml.MODEL_YAML declares each key and its default)."""

    runtime: str
    class_name: str | None
    max_batch_size: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    version_policy: VersionPolicy
    labels: dict[str, str]
    parameters: dict[str, Any]
    dynamic_batching: DynamicBatching | None
    max_queue_size: int | None  # None: the server's --max-queue-size
    timeout_us: int | None  # default_timeout_microseconds; None: --request-timeout
    instances: int | None  # execution instances; None: the runtime's default
    isolation: str  # thread: in the server process; process: worker processes
    load: str | None = None  # eager | lazy; None: the server's --load
    unload_after_idle: float | None = None  # seconds unused before it is unloaded; None: never
    raw: dict[str, Any] = field(default_factory=dict)
    warmup: tuple[WarmupSample, ...] = ()
    sequence_batching: SequenceBatching | None = None
    response_cache: bool = False  # answers cached (with --cache-size)


def read_config(model_dir: Path) -> ModelConfig:
    path = model_dir / CONFIG_FILE
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"{path} is missing") from None
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path} cannot be read: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must hold a mapping of keys, not {type(raw).__name__}")
    try:
        return parse_config(raw)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def parse_config(raw: dict[str, Any]) -> ModelConfig:
    """``raw`` checked against the declaration: every unknown key, wrong type or value is named
    (with the closest known key or value), all of them in one message."""
    values, problems = declare.check(MODEL_YAML, raw)
    check_parameters(values.get("runtime") or "", values.get("parameters"), problems)
    if not problems:
        _check_together(values, problems)
    warmup = samples(values["warmup"] or [], values["max_batch_size"] or 0, problems)
    sequences = sequence_batching(
        values["sequence_batching"], values["max_batch_size"] or 0, problems
    )
    if problems:
        raise ConfigError(str(problems))
    return ModelConfig(
        runtime=values["runtime"],
        class_name=values["class"],
        max_batch_size=values["max_batch_size"],
        inputs=_specs(values["inputs"]),
        outputs=_specs(values["outputs"]),
        version_policy=_policy(values["version_policy"]),
        labels={k: str(v) for k, v in values["labels"].items()},
        parameters=values["parameters"],
        dynamic_batching=_batching(values["dynamic_batching"]),
        max_queue_size=values["max_queue_size"],
        timeout_us=values["default_timeout_microseconds"],
        instances=values["instances"],
        isolation=values["isolation"],
        load=values["load"],
        unload_after_idle=values["unload_after_idle"],
        raw=raw,
        warmup=warmup,
        sequence_batching=sequences,
        response_cache=values["response_cache"],
    )


def _check_together(values: dict[str, Any], problems: declare.Problems) -> None:
    """What one key's type cannot say alone: keys that depend on each other."""
    batching, max_batch = values["dynamic_batching"], values["max_batch_size"]
    if batching is not False and max_batch <= 0:
        problems.add(
            "",
            "'dynamic_batching' needs 'max_batch_size' > 0: only a model whose first dimension "
            "is the batch dimension can be batched",
        )
    preferred = batching.get("preferred_batch_size", []) if isinstance(batching, dict) else []
    if any(p > max_batch for p in preferred):
        problems.add(
            "dynamic_batching.preferred_batch_size",
            f"expected sizes from 1 to max_batch_size ({max_batch}), got {preferred}",
        )
    if batching is not False and values["sequence_batching"] is not None:
        problems.add(
            "",
            "give one scheduler: 'dynamic_batching' or 'sequence_batching' (the sequence "
            "batcher batches the sequences' requests itself)",
        )
    if values["isolation"] == "process" and values["runtime"] not in ("python", "torchserve"):
        problems.add(
            "isolation",
            f"'isolation: process' is offered for python and torchserve models only "
            f"(runtime is {values['runtime']!r})",
        )
    if (values["runtime"] == "ensemble") != bool(values["steps"]):
        problems.add(
            "steps",
            "runtime ensemble needs 'steps'"
            if values["runtime"] == "ensemble"
            else f"'steps' are for runtime ensemble (runtime is {values['runtime']!r})",
        )
    if values["response_cache"] and values.get("sequence_batching"):
        problems.add(
            "response_cache",
            "the response cache does not serve a model with sequence_batching (its answers "
            "depend on the sequence's state, not on the request alone)",
        )
    if values["version_policy"].get("all") is False:
        problems.add("version_policy.all", "only 'all: true' means something (or give latest)")


def _batching(value: bool | dict[str, Any]) -> DynamicBatching | None:
    """``dynamic_batching: {}`` (or ``true``) turns it on; ``false`` or absent leaves it off."""
    if value is False:
        return None
    settings = declare.check(DYNAMIC_BATCHING, {})[0] if value is True else value
    preferred = tuple(sorted(set(settings["preferred_batch_size"])))
    return DynamicBatching(preferred, settings["max_queue_delay_microseconds"])


def _specs(items: list[dict[str, Any]]) -> tuple[TensorSpec, ...]:
    return tuple(TensorSpec(i["name"], i["datatype"], tuple(i["shape"])) for i in items)


def _policy(value: dict[str, Any]) -> VersionPolicy:
    if "all" in value:
        return VersionPolicy(latest=None, all=True)
    if "specific" in value:
        return VersionPolicy(latest=None, specific=tuple(value["specific"]))
    return VersionPolicy(latest=value["latest"])
