"""Triton's classification extension with tritonclient (``class_count``) over REST and gRPC: the
N largest values of an output as ``"value:index[:label]"`` strings, largest first, per batch row,
labels from the model folder's labels.txt; a count that is not a non-negative integer or an output
with no numbers is a 400 with Triton's message (0: no classification, as tritonclient means
it). (Over gRPC: tests_tritongrpc/test_triton_extensions_grpc.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.serverproc import ServerProcess, served, start_server

MODEL = """
import numpy as np
from rosettaserve import Model


class Scores(Model):
    def predict(self, inputs):
        x = inputs["X"]
        return {"SCORES": x, "COUNTS": (x * 10).astype(np.int32), "NAMES": x.astype(bytes)}
"""
SIGNATURE = """\
runtime: python
max_batch_size: {batch}
inputs: [{{name: X, datatype: FP32, shape: {shape}}}]
outputs:
  - {{name: SCORES, datatype: FP32, shape: {shape}}}
  - {{name: COUNTS, datatype: INT32, shape: {shape}}}
  - {{name: NAMES, datatype: BYTES, shape: {shape}}}
"""
ROWS = np.array([[1.1, 3.3, 0.5, 2.4], [0.0, -1.0, 7.25, 7.25]], np.float32)


def build_repository(repo: Path) -> None:
    """The models of these tests (also served to tests_tritongrpc's gRPC tests)."""
    for name, batch, shape in (("batched", 4, "[-1, 4]"), ("flat", 0, "[4]")):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(MODEL)
        (repo / name / "model.yaml").write_text(SIGNATURE.format(batch=batch, shape=shape))
    (repo / "batched" / "labels.txt").write_text("cat\ndog\n\nbird\n")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("classification")
    build_repository(repo)
    yield from served(start_server(repo))


def classify(client: Any, url: str, model: str, x: np.ndarray, **count: int) -> Any:
    """``client``: tritonclient.http, or tritonclient.grpc (from tests_tritongrpc)."""
    (output, k), = count.items()  # fmt: skip
    with client.InferenceServerClient(url) as c:
        given = client.InferInput("X", list(x.shape), "FP32")
        given.set_data_from_numpy(x)
        wanted = client.InferRequestedOutput(output, class_count=k)
        result = c.infer(model, [given], outputs=[wanted])
    return result.as_numpy(output), result.get_output(output)


LARGEST = [
    [b"3.300000:1:dog", b"2.400000:3:bird"],
    [b"7.250000:2", b"7.250000:3:bird"],  # (labels.txt's line 3 is empty: no label)
]
INTEGERS = [b"33:1", b"24:3", b"11:0", b"5:2"]


def test_the_largest_values_come_first_with_their_index_and_label(server: ServerProcess) -> None:
    url = server.http_url.removeprefix("http://")
    classes, meta = classify(httpclient, url, "batched", ROWS, SCORES=2)
    assert classes.tolist() == LARGEST
    assert meta["datatype"] == "BYTES"


def test_integers_without_a_batch_dimension_and_a_count_past_the_values(
    server: ServerProcess,
) -> None:
    url = server.http_url.removeprefix("http://")
    classes, _ = classify(httpclient, url, "flat", ROWS[0], COUNTS=9)
    assert classes.tolist() == INTEGERS


@pytest.mark.parametrize(
    ("output", "count", "message"),
    [
        ("SCORES", -1, "expected a non-negative integer, got -1"),
        ("SCORES", "2", "expected a non-negative integer, got '2'"),
        ("NAMES", 1, "class result not available for output due to unsupported type 'BYTES'"),
    ],
)
def test_a_count_or_output_that_cannot_be_classified_is_a_400(
    server: ServerProcess, output: str, count: Any, message: str
) -> None:
    body = {
        "inputs": [{"name": "X", "datatype": "FP32", "shape": [4], "data": ROWS[0].tolist()}],
        "outputs": [{"name": output, "parameters": {"classification": count}}],
    }
    reply = httpx.post(f"{server.http_url}/v2/models/flat/infer", json=body, timeout=10)
    assert reply.status_code == 400, reply.text
    assert message in reply.json()["error"]
