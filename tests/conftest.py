from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from tests.serverproc import ServerProcess, served, start_server
from tests.v2data import DATATYPES

if TYPE_CHECKING:
    import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "models"
TEST_MODELS = Path(__file__).resolve().parent / "models"


def load_module(name: str, path: Path) -> ModuleType:
    """The Python file ``path`` (a script, code generated for a test) imported as ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assemble_repo(dest: Path, *sources: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for source in sources:
        for model in source.iterdir():
            if model.is_dir() and not model.name.startswith((".", "_")):
                shutil.copytree(
                    model, dest / model.name, ignore=shutil.ignore_patterns("__pycache__")
                )
    return dest


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
    yield from served(start_server(repo))


@pytest.fixture(scope="session")
def mlp_session() -> ort.InferenceSession:
    """onnxruntime on the example MLP's ONNX file: expected values apart from the server."""
    import onnxruntime as ort

    model = EXAMPLES / "mlp_onnx" / "1" / "model.onnx"
    return ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def iris(repo: Path) -> Any:
    """The classifier the server loaded: the repository's own copy of the pickle."""
    import joblib

    return joblib.load(repo / "iris_sklearn" / "model.joblib")
