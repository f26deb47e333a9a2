"""Runtimes: each turns a version folder + model.yaml into a loaded ``Model``."""

from __future__ import annotations

import importlib
from pathlib import Path

from rosettaserve.core.model import Model
from rosettaserve.repository.config import ConfigError, ModelConfig

# runtime name -> "module:factory"; imported only when a model asks for it
RUNTIMES: dict[str, str] = {
    "python": "rosettaserve.runtimes.python:create",
    "onnx": "rosettaserve.runtimes.onnx:OnnxModel",
    "sklearn": "rosettaserve.runtimes.sklearn:SklearnModel",
    "llm": "rosettaserve.runtimes.llm:LlmModel",
}


def create_model(name: str, version: str, path: Path, config: ModelConfig) -> Model:
    """Build (but do not load) the model a version folder holds."""
    target = RUNTIMES.get(config.runtime)
    if target is None:
        raise ConfigError(
            f"unknown runtime {config.runtime!r}; this server has {', '.join(sorted(RUNTIMES))}"
        )
    module_name, attr = target.split(":")
    factory = getattr(importlib.import_module(module_name), attr)
    model: Model = factory(name=name, version=version, path=path, config=config.raw)
    model.inputs = list(config.inputs)
    model.outputs = list(config.outputs)
    model.max_batch_size = config.max_batch_size
    return model


def model_file(model: Model, default: str) -> Path:
    """The weights file of a version: ``parameters.file`` or the runtime's default name."""
    name = (model.config.get("parameters") or {}).get("file", default)
    path = model.path / str(name)
    if not path.is_file():
        raise ConfigError(f"{path} is missing")
    return path
