"""What the system shared memory tests over tritonclient.http (tests/integration) and
tritonclient.grpc (tests_tritongrpc) share: the repository (Triton's ``simple`` add/sub model
and a BYTES model) and the regions they use; and a model with class labels, for the
classification extension. Only ``tritonclient.utils`` is imported here."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.utils.shared_memory as shm

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "models"
SIMPLE_YAML = """\
runtime: python
class: Simple
inputs:
  - {name: INPUT0, datatype: INT32, shape: [-1, 16]}
  - {name: INPUT1, datatype: INT32, shape: [-1, 16]}
outputs:
  - {name: OUTPUT0, datatype: INT32, shape: [-1, 16]}
  - {name: OUTPUT1, datatype: INT32, shape: [-1, 16]}
"""
SIMPLE_PY = '''\
"""Triton's ``simple`` example: the sum and the difference of two INT32 tensors."""

from rosettaserve import Model


class Simple(Model):
    def predict(self, inputs):
        a, b = inputs["INPUT0"], inputs["INPUT1"]
        return {"OUTPUT0": a + b, "OUTPUT1": a - b}
'''
SCORES_YAML = """\
runtime: python
class: Scores
max_batch_size: 8
inputs:
  - {name: X, datatype: FP32, shape: [-1, 4]}
outputs:
  - {name: SCORES, datatype: FP32, shape: [-1, 4]}
"""
SCORES_PY = '''\
"""Its input as its scores: a batch of 4 class scores per row."""

from rosettaserve import Model


class Scores(Model):
    def predict(self, inputs):
        return {"SCORES": inputs["X"]}
'''
LABELS = "cat\ndog\nbird\n"  # three names for four classes: class 3 has none
TENSOR_BYTES = 64  # an INT32 [1, 16] tensor
A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 3, dtype=np.int32)


def make_repo(root: Path) -> Path:
    simple = root / "simple"
    simple.mkdir(parents=True)
    (simple / "model.yaml").write_text(SIMPLE_YAML)
    (simple / "model.py").write_text(SIMPLE_PY)
    shutil.copytree(EXAMPLES / "text_python", root / "text_python")
    scores = root / "scores"
    scores.mkdir()
    (scores / "model.yaml").write_text(SCORES_YAML)
    (scores / "model.py").write_text(SCORES_PY)
    (scores / "labels.txt").write_text(LABELS)
    return root


class Regions:
    """Regions created for one test (unique keys per test), destroyed after it."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.handles: list[Any] = []

    def create(self, name: str, size: int) -> tuple[Any, str]:
        key = f"/{self.prefix}_{name}"
        handle = shm.create_shared_memory_region(f"{self.prefix}_{name}", key, size)
        self.handles.append(handle)
        return handle, key

    def destroy(self) -> None:
        for handle in self.handles:
            shm.destroy_shared_memory_region(handle)


@pytest.fixture
def regions(request: pytest.FixtureRequest) -> Iterator[Regions]:
    made = Regions(f"rs_{request.node.name}"[:60].replace("[", "_").replace("]", "_"))
    yield made
    made.destroy()


def key_path(key: str) -> Path:
    return Path("/dev/shm") / key.lstrip("/")
