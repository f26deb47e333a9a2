"""Model configuration, statistics and model repository extensions over REST (tritonclient.http)."""

from __future__ import annotations

import http.client
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import EXAMPLES
from tests.serverproc import ServerProcess, start_server
from tests.tritonclient_common import expect_error


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.http_hostport)


def infer_mlp(client: httpclient.InferenceServerClient, model: str = "mlp_onnx") -> None:
    tensor = httpclient.InferInput("INPUT0", [3, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((3, 4), np.float32))
    client.infer(model, [tensor])


def test_extensions_listed_only_when_they_work(client: httpclient.InferenceServerClient) -> None:
    extensions = client.get_server_metadata()["extensions"]
    assert {"binary_tensor_data", "model_configuration", "statistics"} <= set(extensions)
    assert "model_repository" not in extensions
    assert "system_shared_memory" not in extensions  # without --allow-client-shm


def test_client_shared_memory_is_off_by_default(client: httpclient.InferenceServerClient) -> None:
    """As in Triton: a client that could register any object the server can open could read it
    back through a model, so registration waits for --allow-client-shm."""
    assert client.get_system_shared_memory_status() == []
    for call in (
        lambda: client.register_system_shared_memory("r", "/r", 8),
        client.unregister_system_shared_memory,
    ):
        expect_error(call, "501", "Client shared memory is disabled", "--allow-client-shm=true")


def test_model_config_in_triton_shape(client: httpclient.InferenceServerClient) -> None:
    onnx = client.get_model_config("mlp_onnx")
    assert onnx["name"] == "mlp_onnx"
    assert onnx["platform"] == "onnxruntime_onnx"
    assert onnx["max_batch_size"] == 0
    assert onnx["input"] == [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1, 4]}]
    assert onnx["output"] == [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1, 3]}]
    batched = client.get_model_config("versioned_python", "1")
    assert batched["max_batch_size"] == 8
    assert batched["input"][0]["dims"] == [-1]  # the batch dim is implied, as in Triton
    text = client.get_model_config("text_python")
    assert text["input"][0]["data_type"] == "TYPE_STRING"
    stream = client.get_model_config("stream_python")
    assert stream["model_transaction_policy"] == {"decoupled": True}


def test_statistics_count_real_requests(client: httpclient.InferenceServerClient) -> None:
    def stats() -> dict[str, object]:
        (only,) = client.get_inference_statistics("mlp_onnx")["model_stats"]
        return only

    before = stats()
    for _ in range(3):
        infer_mlp(client)
    wrong = httpclient.InferInput("INPUT0", [1, 5], "FP32")
    wrong.set_data_from_numpy(np.ones((1, 5), np.float32))
    with pytest.raises(InferenceServerException, match="has shape"):
        client.infer("mlp_onnx", [wrong])
    after = stats()
    assert after["execution_count"] == before["execution_count"] + 3
    assert after["inference_count"] == before["inference_count"] + 3
    success = after["inference_stats"]["success"]
    assert success["count"] == before["inference_stats"]["success"]["count"] + 3
    assert success["ns"] > before["inference_stats"]["success"]["ns"]
    assert (
        after["inference_stats"]["fail"]["count"] == before["inference_stats"]["fail"]["count"] + 1
    )
    assert after["last_inference"] >= before["last_inference"]
    everything = client.get_inference_statistics()["model_stats"]
    assert {"mlp_onnx", "versioned_python"} <= {s["name"] for s in everything}
    versions = client.get_inference_statistics("versioned_python")["model_stats"]
    assert sorted(s["version"] for s in versions) == ["1", "2"]


def test_repository_is_off_by_default(server: ServerProcess) -> None:
    response = httpx.post(server.http_url + "/v2/repository/index")
    assert response.status_code == 403
    assert "--enable-model-control" in response.json()["error"]


@pytest.fixture
def controlled(tmp_path: Path) -> Iterator[ServerProcess]:
    shutil.copytree(EXAMPLES / "mlp_onnx", tmp_path / "mlp_onnx")
    shutil.copytree(EXAMPLES / "text_python", tmp_path / "text_python")
    proc = start_server(tmp_path, "--enable-model-control")
    yield proc
    assert proc.stop() == 0


def test_repository_index_load_unload(controlled: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(controlled.http_hostport)
    assert "model_repository" in client.get_server_metadata()["extensions"]
    index = {row["name"]: row for row in client.get_model_repository_index()}
    row = index["mlp_onnx"]
    assert row.pop("resident_bytes") > 0  # the memory its load took, measured
    assert row == {"name": "mlp_onnx", "version": "1", "state": "READY", "reason": ""}

    client.unload_model("mlp_onnx")
    assert not client.is_model_ready("mlp_onnx")
    with pytest.raises(InferenceServerException, match="no available versions"):
        infer_mlp(client)
    index = {row["name"]: row for row in client.get_model_repository_index()}
    assert index["mlp_onnx"]["state"] == "UNAVAILABLE"
    assert client.is_server_ready()  # an unloaded model does not hold readiness back

    client.load_model("mlp_onnx")
    assert client.is_model_ready("mlp_onnx")
    infer_mlp(client)


@pytest.mark.parametrize(
    ("name", "status", "message"),
    [
        ("..", 400, "invalid model name"),
        ("a..b", 400, "invalid model name"),
        ("bad%00name", 400, "invalid model name"),
        ("bad%5Cname", 400, "invalid model name"),
        ("no_such_model", 404, "no model folder 'no_such_model'"),
    ],
)
def test_repository_load_only_inside_the_repository(
    controlled: ServerProcess, name: str, status: int, message: str
) -> None:
    # http.client sends the path as written (httpx would resolve "..")
    conn = http.client.HTTPConnection(controlled.http_hostport)
    conn.request("POST", f"/v2/repository/models/{name}/load")
    response = conn.getresponse()
    assert response.status == status
    assert message in json.loads(response.read())["error"]
    conn.close()
    assert httpx.get(controlled.http_url + "/v2/health/live").status_code == 200


def test_repository_load_refuses_config_overrides(controlled: ServerProcess) -> None:
    response = httpx.post(
        f"{controlled.http_url}/v2/repository/models/mlp_onnx/load",
        json={"parameters": {"config": "{}"}},
    )
    assert response.status_code == 501
    assert "not supported" in response.json()["error"]
