from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.serverproc import ServerProcess, start_server

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "models"
TEST_MODELS = Path(__file__).resolve().parent / "models"


def assemble_repo(dest: Path, *sources: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for source in sources:
        for model in source.iterdir():
            if model.is_dir() and not model.name.startswith((".", "_")):
                shutil.copytree(
                    model, dest / model.name, ignore=shutil.ignore_patterns("__pycache__")
                )
    return dest


DATATYPES = [
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "FP32", "FP64", "BF16", "BYTES",
]  # fmt: skip


def add_identity_models(repo: Path) -> None:
    """identity_<dtype>: INPUT0 -> OUTPUT0, shape [-1, -1], one model per V2 datatype."""
    source = (TEST_MODELS / "_identity" / "model.py").read_text()
    for dtype in DATATYPES:
        folder = repo / f"identity_{dtype.lower()}"
        folder.mkdir()
        (folder / "model.py").write_text(source)
        (folder / "model.yaml").write_text(
            "runtime: python\nclass: Identity\n"
            f"inputs: [{{name: INPUT0, datatype: {dtype}, shape: [-1, -1]}}]\n"
            f"outputs: [{{name: OUTPUT0, datatype: {dtype}, shape: [-1, -1]}}]\n"
        )


@pytest.fixture(scope="session")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The examples plus the test models, all of which load."""
    repo = assemble_repo(tmp_path_factory.mktemp("repo"), EXAMPLES, TEST_MODELS)
    add_identity_models(repo)
    return repo


@pytest.fixture(scope="session")
def server(repo: Path) -> Iterator[ServerProcess]:
    proc = start_server(repo)
    yield proc
    assert proc.stop() == 0, "\n".join(proc.lines)
