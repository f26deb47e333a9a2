"""Model control with names no folder can have, through tritonclient over REST and gRPC: a
400 / INVALID_ARGUMENT saying why (Triton answers a load it cannot do with 400 too), never a
500 with a traceback; the models served meanwhile answer as they did."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from tests.conftest import EXAMPLES
from tests.serverproc import ServerProcess, served, start_server

NAMES = ["m" * 256, "m" * 5000, "模" * 86]  # 256, 5000 and 258 bytes in UTF-8


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("control_repo")
    shutil.copytree(EXAMPLES / "half_plus_two", repo / "half_plus_two")
    yield from served(start_server(repo, "--enable-model-control"))


def half_plus_two(client: triton_http.InferenceServerClient) -> list[float]:
    x = triton_http.InferInput("x", [2], "FP32")
    x.set_data_from_numpy(np.array([1.0, 4.0], dtype=np.float32))
    return list(client.infer("half_plus_two", [x]).as_numpy("y").tolist())


@pytest.mark.parametrize("name", NAMES, ids=["256-bytes", "5000-bytes", "258-bytes-utf8"])
def test_rest_load_and_unload_of_a_name_too_long_is_400(server: ServerProcess, name: str) -> None:
    client = triton_http.InferenceServerClient(server.http_hostport)
    alone = half_plus_two(client)
    for control in (client.load_model, client.unload_model):
        with pytest.raises(InferenceServerException) as caught:
            control(name)
        assert caught.value.status() == "400"
        message = caught.value.message()
        assert "more than a folder name may have (255)" in message
        assert len(message) < 300
    assert half_plus_two(client) == alone
    assert not any("Traceback" in line for line in server.lines)


def grpc_call(address: str, method: str, request: Any, reply: Any) -> Any:
    """One OIP rpc with the project's own stubs (tritonclient.grpc cannot share this process
    with kserve's stubs: both register package ``inference``)."""
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(
            f"/inference.GRPCInferenceService/{method}",
            request_serializer=request.SerializeToString,
            response_deserializer=reply.FromString,
        )
        return call(request, timeout=30)


@pytest.mark.parametrize("name", NAMES, ids=["256-bytes", "5000-bytes", "258-bytes-utf8"])
def test_grpc_load_and_unload_of_a_name_too_long_is_invalid_argument(
    server: ServerProcess, name: str
) -> None:
    address = server.grpc_address
    controls = (
        ("RepositoryModelLoad", pb.RepositoryModelLoadRequest, pb.RepositoryModelLoadResponse),
        ("RepositoryModelUnload", pb.RepositoryModelUnloadRequest,
         pb.RepositoryModelUnloadResponse),
    )  # fmt: skip
    for method, request, reply in controls:
        with pytest.raises(grpc.RpcError) as caught:
            grpc_call(address, method, request(model_name=name), reply)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "more than a folder name may have (255)" in caught.value.details()
    ready = pb.ModelReadyRequest(name="half_plus_two")
    assert grpc_call(address, "ModelReady", ready, pb.ModelReadyResponse).ready
    assert not any("Traceback" in line for line in server.lines)


def test_the_longest_name_a_folder_may_have_is_looked_up(server: ServerProcess) -> None:
    client = triton_http.InferenceServerClient(server.http_hostport)
    with pytest.raises(InferenceServerException) as caught:
        client.load_model("m" * 255)
    assert caught.value.status() == "404"
    assert "no model folder" in caught.value.message()
