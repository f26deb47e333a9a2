"""Triton's raw binary request (``Inference-Header-Content-Length: 0``: the body is the one
input's bytes, no JSON header): the shape is deduced from the model's signature as Triton deduces
it, every output comes back binary, and a model whose signature cannot say the shape is a 400
naming why — sent as Triton's own tests send it, with a plain HTTP client."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from tests.serverproc import ServerProcess, served, start_server

MODEL = """
import numpy as np
from rosettaserve import Model


class Double(Model):
    def predict(self, inputs):
        x = inputs["X"]
        if x.dtype == object:
            return {"Y": np.vectorize(lambda b: b.upper(), otypes=[object])(x)}
        return {"Y": x * 2}
"""
MODELS = {  # name: (max_batch_size, [(input, datatype, shape)])
    "rows": (4, [("X", "FP32", [-1, 3])]),
    "vector": (0, [("X", "INT32", [-1])]),
    "text": (4, [("X", "BYTES", [-1, 1])]),
    "texts": (0, [("X", "BYTES", [-1])]),
    "two_inputs": (0, [("X", "FP32", [-1]), ("Z", "FP32", [-1])]),
    "two_variable": (0, [("X", "FP32", [-1, -1])]),
}
RAW = {"inference-header-content-length": "0"}


def write(repo: Path, name: str, batch: int, inputs: list[tuple[str, str, list[int]]]) -> None:
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(MODEL)
    lines = ["runtime: python", f"max_batch_size: {batch}", "inputs:"]
    lines += [f"  - {{name: {n}, datatype: {d}, shape: {s}}}" for n, d, s in inputs]
    _, d, s = inputs[0]
    lines += ["outputs:", f"  - {{name: Y, datatype: {d}, shape: {s}}}"]
    (folder / "model.yaml").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("raw_binary")
    for name, (batch, inputs) in MODELS.items():
        write(repo, name, batch, inputs)
    yield from served(start_server(repo))


def raw(server: ServerProcess, model: str, body: bytes) -> httpx.Response:
    return httpx.post(f"{server.http_url}/v2/models/{model}/infer", content=body, headers=RAW)


def answer(reply: httpx.Response) -> tuple[dict[str, Any], bytes]:
    assert reply.status_code == 200, reply.text
    split = int(reply.headers["inference-header-content-length"])
    doc: dict[str, Any] = orjson.loads(reply.content[:split])
    return doc, reply.content[split:]


def test_a_fixed_row_is_one_batch_row_and_answers_binary(server: ServerProcess) -> None:
    doc, blob = answer(raw(server, "rows", np.array([1, 2, 3], "<f4").tobytes()))
    (out,) = doc["outputs"]
    assert (out["name"], out["datatype"], out["shape"]) == ("Y", "FP32", [1, 3])
    assert out["parameters"] == {"binary_data_size": 12}
    assert np.frombuffer(blob, "<f4").tolist() == [2, 4, 6]


def test_the_one_variable_dimension_comes_from_the_byte_count(server: ServerProcess) -> None:
    values = np.arange(7, dtype="<i4")
    doc, blob = answer(raw(server, "vector", values.tobytes()))
    assert doc["outputs"][0]["shape"] == [7]
    assert np.frombuffer(blob, "<i4").tolist() == (values * 2).tolist()


def test_a_bytes_input_is_the_whole_body_and_answers_with_its_length(
    server: ServerProcess,
) -> None:
    doc, blob = answer(raw(server, "text", b"hello raw"))
    assert doc["outputs"][0]["shape"] == [1, 1]
    assert blob == struct.pack("<I", 9) + b"HELLO RAW"


def test_a_chunked_body_is_read_whole(server: ServerProcess) -> None:
    def chunks() -> Iterator[bytes]:
        yield np.array([5], "<i4").tobytes()
        yield np.array([6, 7], "<i4").tobytes()

    reply = httpx.post(f"{server.http_url}/v2/models/vector/infer", content=chunks(), headers=RAW)
    assert np.frombuffer(answer(reply)[1], "<i4").tolist() == [10, 12, 14]


@pytest.mark.parametrize(
    ("model", "body", "message"),
    [
        ("texts", b"abc", "the model's input shape must be [1]"),
        ("two_inputs", b"\0" * 8, "exactly 1 input; model 'two_inputs' has 2"),
        ("two_variable", b"\0" * 8, "more than one variable-sized dimension"),
        ("rows", b"\0" * 8, "needs 12 bytes, but 8 were sent"),
        ("vector", b"\0" * 7, "not a whole number of 4-byte elements"),
        ("no_such_model", b"\0" * 4, "no_such_model"),
    ],
)
def test_what_the_signature_cannot_say_is_a_400_naming_why(
    server: ServerProcess, model: str, body: bytes, message: str
) -> None:
    reply = raw(server, model, body)
    assert reply.status_code == (404 if model == "no_such_model" else 400), reply.text
    assert message in reply.json()["error"]
    assert answer(raw(server, "vector", np.array([1], "<i4").tobytes()))[1]  # others go on
