"""Runtimes: each turns a version folder + model.yaml into a loaded ``Model``."""

from __future__ import annotations

import importlib
from pathlib import Path

from rosettaserve.core.model import Model
from rosettaserve.repository.config import ConfigError, ModelConfig
from rosettaserve.repository.model_yaml import RUNTIMES, Runtime


def create_model(name: str, version: str, path: Path, config: ModelConfig) -> Model:
    """Build (but do not load) the model a version folder holds."""
    runtime = RUNTIMES[config.runtime]  # parse_config refused any other
    require_packages(runtime)
    module_name, attr = runtime.factory.split(":")
    factory = getattr(importlib.import_module(module_name), attr)
    model: Model = factory(name=name, version=version, path=path, config=config.raw)
    model.inputs = list(config.inputs)
    model.outputs = list(config.outputs)
    model.max_batch_size = config.max_batch_size
    return model


def require_packages(runtime: Runtime) -> None:
    """Import what ``runtime`` needs, or say which extra installs it: an install without the
    runtime's extra serves every other model."""
    for package in runtime.packages:
        try:
            importlib.import_module(package)
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.partition(".")[0] != package:
                raise  # the package is there, but something it imports is not
            raise ConfigError(
                f"runtime {runtime.name} needs the Python package {package!r}, which is not "
                f"installed: pip install 'rosettaserve[{runtime.extra}]'"
            ) from None


def model_file(model: Model, default: str) -> Path:
    """The weights file of a version: ``parameters.file`` or the runtime's default name."""
    name = (model.config.get("parameters") or {}).get("file", default)
    path = model.path / str(name)
    if not path.is_file():
        raise ConfigError(f"{path} is missing")
    return path
