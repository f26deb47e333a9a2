"""The ``python`` runtime: a user class from model.py."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from rosettaserve.core.model import Model
from rosettaserve.repository.config import ConfigError

MODULE_FILE = "model.py"


def create(name: str, version: str, path: Path, config: dict[str, Any]) -> Model:
    source = _find_source(path)
    module = _import(source, f"rosettaserve_user.{name}.v{version}")
    cls = _pick_class(module, config.get("class"), source)
    return cls(name=name, version=version, path=path, config=config)


def _find_source(path: Path) -> Path:
    for folder in (path, path.parent):
        if (folder / MODULE_FILE).is_file():
            return folder / MODULE_FILE
    raise ConfigError(f"runtime python needs {MODULE_FILE} in {path} or {path.parent}")


def _import(source: Path, module_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, source)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{source} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(source.parent))  # let model.py import its neighbours
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(source.parent))
    return module


def _pick_class(module: ModuleType, class_name: Any, source: Path) -> type[Model]:
    if class_name:
        cls = getattr(module, str(class_name), None)
        if not (inspect.isclass(cls) and issubclass(cls, Model)):
            raise ConfigError(f"{source} has no Model subclass named {class_name!r}")
        return cls
    found = [
        c
        for c in vars(module).values()
        if inspect.isclass(c) and issubclass(c, Model) and c.__module__ == module.__name__
    ]
    if len(found) != 1:
        names = [c.__name__ for c in found] or "none"
        raise ConfigError(f"name the model class in model.yaml 'class:' ({source} defines {names})")
    return found[0]
