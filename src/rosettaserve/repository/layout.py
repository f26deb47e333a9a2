"""Where models and versions live on disk."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rosettaserve.core.registry import CLASS_LABELS
from rosettaserve.repository.config import CONFIG_FILE

_SKIP = {"__pycache__"}


@dataclass(frozen=True)
class ModelDir:
    name: str
    path: Path
    versions: dict[int, Path]  # version number -> folder holding that version's files
    config_mtime: float  # changes when model.yaml is edited; 0.0 when missing


def scan_repository(root: Path) -> dict[str, ModelDir]:
    """Every model folder under ``root`` (hidden folders and caches are skipped)."""
    found: dict[str, ModelDir] = {}
    for child in sorted(root.iterdir()):
        if child.is_dir() and not child.name.startswith(".") and child.name not in _SKIP:
            found[child.name] = scan_model(child)
    return found


def scan_model(path: Path) -> ModelDir:
    numeric = {int(p.name): p for p in path.iterdir() if p.is_dir() and p.name.isdigit()}
    config = path / CONFIG_FILE
    try:
        mtime = os.stat(config).st_mtime
    except OSError:
        mtime = 0.0
    return ModelDir(path.name, path, numeric or {1: path}, mtime)


MAX_LABELS_BYTES = 16 << 20


def read_class_labels(model_dir: Path) -> list[str]:
    """The class names of ``model_dir``'s labels.txt (line N names class N); none without one.
    A file past MAX_LABELS_BYTES fails the load rather than being read whole."""
    path = model_dir / CLASS_LABELS
    if not path.is_file():
        return []
    if path.stat().st_size > MAX_LABELS_BYTES:
        raise ValueError(f"{path} is larger than {MAX_LABELS_BYTES} bytes")
    return path.read_text("utf-8", errors="replace").splitlines()
