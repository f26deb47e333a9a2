"""model.yaml: parsed once into a typed object, with errors a person can act on."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rosettaserve.core import dtypes
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.registry import DynamicBatching
from rosettaserve.core.types import TensorSpec

CONFIG_FILE = "model.yaml"
ISOLATIONS = ("thread", "process")
BATCHING_KEYS = {"preferred_batch_size", "max_queue_delay_microseconds"}


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
    runtime: str
    class_name: str | None = None
    max_batch_size: int = 0
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    version_policy: VersionPolicy = field(default_factory=VersionPolicy)
    labels: dict[str, str] = field(default_factory=dict)
    parameters: dict[str, Any] = field(default_factory=dict)
    dynamic_batching: DynamicBatching | None = None
    max_queue_size: int | None = None  # None: the server's --max-queue-size
    timeout_us: int | None = None  # default_timeout_microseconds; None: --request-timeout
    instances: int | None = None  # execution instances; None: the runtime's default
    isolation: str = "thread"  # thread: in the server process; process: worker processes
    raw: dict[str, Any] = field(default_factory=dict)


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
    runtime = raw.get("runtime")
    if not isinstance(runtime, str) or not runtime:
        raise ConfigError("'runtime' is required (python, onnx, sklearn, ...)")
    max_batch = raw.get("max_batch_size", 0)
    if type(max_batch) is not int or max_batch < 0:
        raise ConfigError(f"'max_batch_size' must be a non-negative integer, got {max_batch!r}")
    class_name = raw.get("class")
    if class_name is not None and not isinstance(class_name, str):
        raise ConfigError(f"'class' must be a class name, got {class_name!r}")
    parameters = raw.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise ConfigError("'parameters' must be a mapping")
    return ModelConfig(
        runtime=runtime,
        class_name=class_name,
        max_batch_size=max_batch,
        inputs=_specs(raw.get("inputs"), "inputs"),
        outputs=_specs(raw.get("outputs"), "outputs"),
        version_policy=_policy(raw.get("version_policy")),
        labels=_labels(raw.get("labels")),
        parameters=parameters,
        dynamic_batching=_batching(raw.get("dynamic_batching"), max_batch),
        max_queue_size=_count(raw, "max_queue_size"),
        timeout_us=_count(raw, "default_timeout_microseconds"),
        instances=_instances(raw.get("instances")),
        isolation=_isolation(raw.get("isolation"), runtime),
        raw=raw,
    )


def _instances(value: Any) -> int | None:
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise ConfigError(
            f"'instances' must be an integer of at least 1 (calls of this model that run at "
            f"once), got {value!r}"
        )
    return value


def _isolation(value: Any, runtime: str) -> str:
    if value is None:
        return "thread"
    if value not in ISOLATIONS:
        raise ConfigError(f"'isolation' must be one of {list(ISOLATIONS)}, got {value!r}")
    if value == "process" and runtime != "python":
        raise ConfigError(
            f"'isolation: process' is offered for python models only (runtime is {runtime!r})"
        )
    return str(value)


def _count(raw: dict[str, Any], key: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise ConfigError(f"'{key}' must be a non-negative integer (0: none), got {value!r}")
    return value


def _batching(raw: Any, max_batch: int) -> DynamicBatching | None:
    """``dynamic_batching: {}`` (or ``true``) turns it on; ``false`` or absent leaves it off."""
    if raw is None or raw is False:
        return None
    if raw is True:
        raw = {}
    if not isinstance(raw, dict) or set(raw) - BATCHING_KEYS:
        raise ConfigError(
            f"'dynamic_batching' must be a mapping with keys among {sorted(BATCHING_KEYS)} "
            f"(or true), got {raw!r}"
        )
    if max_batch <= 0:
        raise ConfigError(
            "'dynamic_batching' needs 'max_batch_size' > 0: only a model whose first dimension "
            "is the batch dimension can be batched"
        )
    preferred = raw.get("preferred_batch_size") or []
    if not isinstance(preferred, list) or not all(
        type(p) is int and 1 <= p <= max_batch for p in preferred
    ):
        raise ConfigError(
            f"'dynamic_batching.preferred_batch_size' must be a list of sizes from 1 to "
            f"max_batch_size ({max_batch}), got {preferred!r}"
        )
    delay = _count(raw, "max_queue_delay_microseconds") or 0
    return DynamicBatching(tuple(sorted(set(preferred))), delay)


def _specs(items: Any, key: str) -> tuple[TensorSpec, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        raise ConfigError(f"'{key}' must be a list of {{name, datatype, shape}}")
    specs = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ConfigError(f"'{key}[{i}]' needs a 'name'")
        name = item["name"]
        try:
            datatype = dtypes.lookup(str(item.get("datatype", ""))).name
        except InvalidInput as exc:
            raise ConfigError(f"'{key}[{i}]' ({name}): {exc}") from None
        shape = item.get("shape", [-1])
        if not isinstance(shape, list) or not all(type(d) is int and d >= -1 for d in shape):
            raise ConfigError(f"'{key}[{i}]' ({name}): 'shape' must be a list of ints (-1 = any)")
        specs.append(TensorSpec(name, datatype, tuple(shape)))
    return tuple(specs)


def _policy(raw: Any) -> VersionPolicy:
    if raw is None:
        return VersionPolicy()
    if isinstance(raw, dict) and len(raw) == 1:
        ((key, value),) = raw.items()
        if key == "latest" and type(value) is int and value >= 1:
            return VersionPolicy(latest=value)
        if key == "all" and value is True:
            return VersionPolicy(latest=None, all=True)
        if key == "specific" and _int_list(value):
            return VersionPolicy(latest=None, specific=tuple(value))
    raise ConfigError(
        f"'version_policy' must be {{latest: N}}, {{all: true}} or {{specific: [N, ...]}}, "
        f"got {raw!r}"
    )


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(v) is int and v >= 0 for v in value)


def _labels(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and type(v) is int for k, v in raw.items()
    ):
        raise ConfigError(f"'labels' must map label names to version numbers, got {raw!r}")
    return {k: str(v) for k, v in raw.items()}
