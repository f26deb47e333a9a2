"""The response cache's test repository and helpers, shared by the tritonclient.http tests
(tests/integration/test_response_cache.py) and the tritonclient.grpc ones (tests_tritongrpc):
only ``tritonclient.utils``-free code here (see tests/tritonclient_common.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

MODEL = '''
import numpy as np
from rosettaserve import Model


class Counter(Model):
    """OUT: the input doubled; CALL: how many times predict ran (a hit does not run it)."""

    def load(self):
        self.calls = 0

    def predict(self, inputs):
        self.calls += 1
        x = inputs["X"]
        text = np.array([t + b"!" for t in inputs["T"].reshape(-1)], dtype=object)
        return {"OUT": x * 2, "CALL": np.array([self.calls], np.int64), "TEXT": text}
'''
SIGNATURE = """\
runtime: python
inputs:
  - {name: X, datatype: FP32, shape: [-1]}
  - {name: T, datatype: BYTES, shape: [-1]}
outputs:
  - {name: OUT, datatype: FP32, shape: [-1]}
  - {name: CALL, datatype: INT64, shape: [1]}
  - {name: TEXT, datatype: BYTES, shape: [-1]}
"""
STREAMING = """
from rosettaserve import Model


class Streamer(Model):
    def predict(self, inputs):
        yield {"OUT": inputs["X"]}
"""


def model(repo: Path, name: str, yaml: str, code: str = MODEL) -> None:
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(code)
    (folder / "model.yaml").write_text(SIGNATURE + yaml)


def cache_repo(root: Path) -> Path:
    """``cached`` (response_cache: true), ``uncached``, and ``streaming``, which asks for the
    cache and streams (its load fails)."""
    model(root, "cached", "response_cache: true\n")
    model(root, "uncached", "")
    model(root, "streaming", "response_cache: true\n", STREAMING)
    return root


def inputs(module: Any, values: list[float], text: list[bytes]) -> list[Any]:
    """The request's inputs, as tritonclient ``module`` (http or grpc) builds them."""
    x = module.InferInput("X", [len(values)], "FP32")
    x.set_data_from_numpy(np.array(values, np.float32))
    t = module.InferInput("T", [len(text)], "BYTES")
    t.set_data_from_numpy(np.array(text, dtype=object))
    return [x, t]


def calls(result: Any) -> int:
    """How many times the model had run when it made this answer."""
    return int(result.as_numpy("CALL")[0])
