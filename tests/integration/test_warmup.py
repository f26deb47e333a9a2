"""Warmup (model.yaml ``warmup``, Triton's ``model_warmup``): the samples run through the
version before it is ready, with the data they declare; the statistics count clients' requests
only; a failing sample, a file outside the model's warmup/ folder or a sample without one data
source fails that version's load, saying why, while the other models serve."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.serverproc import ServerProcess, served, start_server, wait_for

MODEL = '''
import json
import numpy as np
from rosettaserve import Model


class Recorder(Model):
    """Answers, for each row, the calls it saw before this one (warmups included)."""

    def load(self):
        self.seen = []

    def predict(self, inputs):
        values, text = inputs["VALUES"], inputs["TEXT"]
        if self.config.get("parameters", {}).get("refuse_zeros") and not values.any():
            raise ValueError("all-zero values are refused")
        history = json.dumps(self.seen).encode()
        self.seen.append(
            {"values": values.tolist(), "text": [[t.decode() for t in row] for row in text]}
        )
        return {"HISTORY": np.array([[history]] * len(values), dtype=object)}
'''
SIGNATURE = """\
runtime: python
max_batch_size: 4
inputs:
  - {name: VALUES, datatype: FP32, shape: [-1, 2]}
  - {name: TEXT, datatype: BYTES, shape: [-1, 2]}
outputs:
  - {name: HISTORY, datatype: BYTES, shape: [-1, 1]}
"""
WARMED = """\
warmup:
  - name: zeros
    batch_size: 2
    count: 2
    inputs:
      VALUES: {data_type: FP32, dims: [2], zero_data: true}
      TEXT: {data_type: BYTES, dims: [2], zero_data: true}
  - name: from_files
    inputs:
      VALUES: {data_type: FP32, dims: [2], input_data_file: values.bin}
      TEXT: {data_type: BYTES, dims: [2], input_data_file: text.bin}
"""
ZEROS = """\
parameters: {refuse_zeros: true}
warmup:
  - name: all_zero
    inputs:
      VALUES: {data_type: FP32, dims: [2], zero_data: true}
      TEXT: {data_type: BYTES, dims: [2], random_data: true}
"""
OUTSIDE = """\
warmup:
  - name: escape
    inputs:
      VALUES: {data_type: FP32, dims: [2], input_data_file: ../model.yaml}
      TEXT: {data_type: BYTES, dims: [2], zero_data: true}
"""
TWO_SOURCES = """\
warmup:
  - name: both
    inputs:
      VALUES: {data_type: FP32, dims: [2], zero_data: true, random_data: true}
      TEXT: {data_type: BYTES, dims: [2], zero_data: true}
"""


def model(repo: Path, name: str, yaml: str) -> Path:
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(MODEL)
    (folder / "model.yaml").write_text(SIGNATURE + yaml)
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("warmup_repo")
    warmed = model(repo, "warmed", WARMED)
    (warmed / "warmup").mkdir()
    (warmed / "warmup" / "values.bin").write_bytes(struct.pack("<2f", 1.5, -2.0))
    text = b"".join(struct.pack("<I", len(t)) + t for t in (b"hello", b"w\xc3\xb6rld"))
    (warmed / "warmup" / "text.bin").write_bytes(text)
    model(repo, "refuses_zeros", ZEROS)
    model(repo, "outside", OUTSIDE)
    model(repo, "two_sources", TWO_SOURCES)
    model(repo, "cold", "")
    yield from served(start_server(repo, wait_ready=False))


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    url = server.http_url.removeprefix("http://")
    with httpclient.InferenceServerClient(url) as c:
        c.is_server_ready()
        yield c


def history(client: httpclient.InferenceServerClient, name: str) -> list[dict[str, object]]:
    values = httpclient.InferInput("VALUES", [1, 2], "FP32")
    values.set_data_from_numpy(np.array([[3.0, 4.0]], np.float32))
    text = httpclient.InferInput("TEXT", [1, 2], "BYTES")
    text.set_data_from_numpy(np.array([[b"a", b"b"]], dtype=object))
    result = client.infer(name, [values, text])
    answer = result.as_numpy("HISTORY")
    assert answer is not None
    seen: list[dict[str, object]] = json.loads(answer[0][0])
    return seen


def wait_loaded(server: ServerProcess) -> None:
    wait_for(lambda: any("models," in line and "versions:" in line for line in server.lines))


def test_the_samples_ran_before_the_first_request_with_their_data(
    server: ServerProcess, client: httpclient.InferenceServerClient
) -> None:
    wait_loaded(server)
    zeros = {"values": [[0.0, 0.0]] * 2, "text": [["", ""]] * 2}
    from_files = {"values": [[1.5, -2.0]], "text": [["hello", "wörld"]]}
    assert history(client, "warmed") == [zeros, zeros, from_files]
    assert history(client, "cold") == []


def test_the_statistics_count_the_clients_requests_only(
    server: ServerProcess, client: httpclient.InferenceServerClient
) -> None:
    wait_loaded(server)
    earlier = len(history(client, "warmed"))  # the calls before this one: 3 warmups, clients'
    stats = client.get_inference_statistics("warmed")["model_stats"][0]
    assert stats["inference_count"] == earlier - 3 + 1
    assert stats["inference_stats"]["success"]["count"] == earlier - 3 + 1


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("refuses_zeros", "warmup sample 'all_zero' failed: all-zero values are refused"),
        ("outside", "input_data_file '../model.yaml' is not a file in"),
        ("two_sources", "give exactly one of zero_data, random_data, input_data_file"),
    ],
)
def test_a_warmup_that_cannot_run_fails_the_load_saying_why(
    server: ServerProcess, name: str, reason: str
) -> None:
    wait_loaded(server)
    meta = httpx.get(f"{server.http_url}/v2/models/{name}", timeout=10).json()
    assert meta["properties"]["state"] == "UNAVAILABLE"
    assert reason in meta["properties"]["reason"]
    assert httpx.get(f"{server.http_url}/v2/models/{name}/ready", timeout=10).status_code == 503
    assert httpx.get(f"{server.http_url}/v2/models/warmed/ready", timeout=10).status_code == 200
