"""Two servers on two hosts from one model repository, and a client that spreads its requests
over both, as a Kubernetes Service spreads them over a Deployment's pods: the same answers from
either host (OIP REST, and tritonclient), and each host served its share."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as triton_http

from tests.conftest import EXAMPLES
from tests.multihost.netns import Network
from tests.serverproc import ServerProcess, stop_cleanly, wait_until_ready

REQUESTS = 20


@pytest.fixture(scope="module")
def servers(
    network: Callable[[str], Network], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    net = network("s")
    client = net.add_host("client", 10)
    hosts = [net.add_host(name, octet) for name, octet in [("server-a", 2), ("server-b", 3)]]
    repo = tmp_path_factory.mktemp("one_repo")  # both hosts serve this one folder
    for model in ("half_plus_two", "mlp_onnx"):
        shutil.copytree(EXAMPLES / model, repo / model)
    procs = [
        net.start(host, "serve", str(repo), "--host", "0.0.0.0", "--http-port", "8000",
                  "--grpc-port", "8001")
        for host in hosts
    ]  # fmt: skip
    with net.inside(client):
        for proc in procs:
            wait_until_ready(proc)
        yield {"net": net, "client": client, "hosts": hosts, "procs": procs}
        for proc in procs:
            stop_cleanly(proc)


def successes(proc: ServerProcess, model: str) -> int:
    doc = httpx.get(f"{proc.http_url}/v2/models/{model}/stats", timeout=10).json()
    return int(doc["model_stats"][0]["inference_stats"]["success"]["count"])


def test_requests_spread_over_two_hosts(servers: dict[str, Any]) -> None:
    procs: list[ServerProcess] = servers["procs"]
    before = [successes(p, "half_plus_two") for p in procs]
    turn = itertools.cycle(procs)
    answers = []
    for i in range(REQUESTS):
        doc = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [i, 2 * i]}]}
        reply = httpx.post(f"{next(turn).http_url}/v2/models/half_plus_two/infer", json=doc,
                           timeout=30)  # fmt: skip
        assert reply.status_code == 200, reply.text
        answers.append(reply.json()["outputs"][0]["data"])
    assert answers == [[0.5 * i + 2, i + 2] for i in range(REQUESTS)]
    after = [successes(p, "half_plus_two") for p in procs]
    assert [a - b for a, b in zip(after, before, strict=True)] == [REQUESTS // 2] * 2


def test_both_hosts_give_the_same_onnx_answer(servers: dict[str, Any]) -> None:
    outputs = []
    for proc in servers["procs"]:
        client = triton_http.InferenceServerClient(proc.http_url.removeprefix("http://"))
        meta = client.get_model_metadata("mlp_onnx")
        (inp,) = meta["inputs"]
        shape = [4 if d == -1 else d for d in inp["shape"]]
        data = np.linspace(-1, 1, int(np.prod(shape)), dtype=np.float32).reshape(shape)
        tensor = triton_http.InferInput(inp["name"], shape, inp["datatype"])
        tensor.set_data_from_numpy(data)
        result = client.infer("mlp_onnx", [tensor])
        outputs.append(result.as_numpy(meta["outputs"][0]["name"]))
        client.close()
    assert outputs[0] is not None
    np.testing.assert_array_equal(outputs[0], outputs[1])
