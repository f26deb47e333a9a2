"""The test archives, built with TorchServe's own ``torch-model-archiver`` from the handlers in
handlers/ (and a TorchScript Linear(4, 2) made from a fixed seed): one ``NAME.mar`` each in a
model store, and a rosettaserve repository serving the same files (``NAME/1/model.mar``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HANDLERS = Path(__file__).parent / "handlers"
# name: (handler, serialized file wanted, model-config.yaml)
ARCHIVES: dict[str, tuple[str, bool, str]] = {
    "linear": ("linear_handler.py", True, ""),
    "default_base": ("base_handler", True, ""),  # TorchServe's BaseHandler, by its name
    "echo": ("echo_handler.py", False, "custom:\n  greeting: hello\n"),
    "stream": ("stream_handler.py", False, ""),
    "batch": ("batch_handler.py", False, "batchSize: 4\nmaxBatchDelay: 5000\n"),
    "extra": ("echo_handler.py", False, ""),  # registered by the tests (POST /models?url=)
}
UNLOADED = ("extra",)  # in the store, not loaded at the start
MODEL_YAML = "runtime: torchserve\n"


def linear_model(path: Path) -> Path:
    import torch

    torch.manual_seed(0)
    torch.jit.script(torch.nn.Linear(4, 2)).save(str(path))
    return path


def archiver() -> str:
    return str(Path(sys.executable).parent / "torch-model-archiver")


def build_store(
    store: Path, work: Path, archives: dict[str, tuple[str, bool, str]] = ARCHIVES
) -> Path:
    """``archives``: ARCHIVES, or another set of the same form (the benchmark's)."""
    store.mkdir(parents=True, exist_ok=True)
    weights = linear_model(work / "model.pt")
    for name, (handler, serialized, config) in archives.items():
        handler_arg = str(HANDLERS / handler) if handler.endswith(".py") else handler
        cmd = [archiver(), "--model-name", name, "--version", "1", "--handler", handler_arg,
               "--export-path", str(store), "--force"]  # fmt: skip
        if serialized:
            cmd += ["--serialized-file", str(weights)]
        if config:
            config_file = work / f"{name}-config.yaml"
            config_file.write_text(config)
            cmd += ["--config-file", str(config_file)]
        subprocess.run(cmd, check=True, env=dict(os.environ))
    return store


def build_repository(store: Path, repo: Path) -> Path:
    """Each archive in a model folder, but those the tests register, which stay at the
    repository's top level as in TorchServe's model store."""
    repo.mkdir(parents=True, exist_ok=True)
    for mar in store.glob("*.mar"):
        if mar.stem in UNLOADED:
            shutil.copyfile(mar, repo / mar.name)
            continue
        version = repo / mar.stem / "1"
        version.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(mar, version / "model.mar")
        (repo / mar.stem / "model.yaml").write_text(MODEL_YAML)
    return repo
