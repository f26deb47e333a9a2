"""API keys on every protocol family of one server (over TLS): no key, a wrong key and each
right key (--api-key, --api-key-file, ROSETTASERVE_API_KEY) with real clients and in each
family's own error shape; the probes stay open; keys never reach the log."""

from __future__ import annotations

import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gevent.ssl
import grpc
import httpx
import numpy as np
import openai
import pytest
import tritonclient.http as triton_http
from text_generation import Client as TgiClient

from rosettaserve.protocols.grps.pb import grps_pb2
from rosettaserve.protocols.health.pb import health_pb2
from rosettaserve.protocols.oip.pb import grpc_service_pb2 as oip_pb
from tests.conftest import EXAMPLES
from tests.integration.grps_support import generate_stubs
from tests.integration.tls_support import Pki, make_pki, start_tls_server
from tests.pdproc import eventually
from tests.serverproc import ServerProcess, served

TIMEOUT_S = 60.0
FLAG_KEY, FILE_KEY, ENV_KEY = "flag-key-1a2b", "file-key-3c4d", "env-key-5e6f"
WRONG = "wrong-key-7a8b"
ROTATED = "rotated-key-9c0d"
OIP = "/inference.GRPCInferenceService/"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "keys.txt"
    path.write_text(f"# the team's key\n\n{FILE_KEY}\n")
    return path


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, pki: Pki, key_file: Path
) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("keys_repo")
    for model in (
        "half_plus_two",
        "greeter_python",
        "tiny_llama",
        "tiny_embedder",
        "tiny_reranker",
    ):
        shutil.copytree(EXAMPLES / model, repo / model)
    args = ["--api-key", FLAG_KEY, "--api-key-file", str(key_file)]
    args += ["--grps-default-model", "greeter_python"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ROSETTASERVE_API_KEY", ENV_KEY)
        started = start_tls_server(repo, pki, *args)
    yield from served(started)


@pytest.fixture(scope="module")
def http(server: ServerProcess, pki: Pki) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, verify=pki.context(), timeout=TIMEOUT_S) as c:
        yield c


@pytest.fixture(scope="module")
def channel(server: ServerProcess, pki: Pki) -> Iterator[grpc.Channel]:
    credentials = grpc.ssl_channel_credentials(pki.ca_pem.read_bytes())
    with grpc.secure_channel(server.grpc_address.removesuffix(" (tls)"), credentials) as ch:
        yield ch


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


LLM = {"max_tokens": 2, "temperature": 0}
Shape = Callable[[Any], bool]


def plain(doc: Any) -> bool:  # OIP, TF Serving, Triton generate
    return isinstance(doc["error"], str) and "Bearer" in doc["error"]


def with_type(doc: Any) -> bool:  # TGI, vLLM, MindIE
    return isinstance(doc["error"], str) and isinstance(doc["error_type"], str)


def openai_shape(doc: Any) -> bool:
    error = doc["error"]
    return {"message", "type", "code"} <= set(error) and error["code"] == "invalid_api_key"


def grps_shape(doc: Any) -> bool:
    return bool(doc["status"]["code"] == 401 and doc["status"]["status"] == "FAILURE")


FAMILIES: list[tuple[str, str, str, dict[str, Any] | None, Shape]] = [
    ("oip", "POST", "/v2/models/half_plus_two/infer",
     {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.0]}]}, plain),
    ("oip-metadata", "GET", "/v2/models/half_plus_two", None, plain),
    ("oip-model-ready", "GET", "/v2/models/half_plus_two/ready", None, plain),
    ("tfserving", "POST", "/v1/models/half_plus_two:predict", {"instances": [1.0]}, plain),
    ("grps", "POST", "/grps/v1/infer/predict", {"str_data": "x"}, grps_shape),
    ("openai", "POST", "/v1/completions", {"model": "tiny_llama", "prompt": "hi", **LLM},
     openai_shape),
    ("tgi", "POST", "/generate", {"inputs": "hi", "parameters": {"max_new_tokens": 2}}, with_type),
    ("vllm", "POST", "/generate", {"prompt": "hi", **LLM}, with_type),
    ("triton-generate", "POST", "/v2/models/tiny_llama/generate",
     {"text_input": "hi", "parameters": {"max_tokens": 2}}, plain),
    ("mindie", "POST", "/infer", {"inputs": "hi", "stream": False}, with_type),
    ("openai-embeddings", "POST", "/v1/embeddings", {"model": "tiny_embedder", "input": "hi"},
     openai_shape),
    ("tei-embed", "POST", "/embed", {"inputs": "hi"}, with_type),
    ("tei-rerank", "POST", "/rerank", {"query": "q", "texts": ["a"]}, with_type),
    ("rerank", "POST", "/v1/rerank", {"query": "q", "documents": ["a"]}, openai_shape),
    ("metrics", "GET", "/metrics", None, lambda doc: True),
]  # fmt: skip


PROBES = ["/v2/health/live", "/v2/health/ready", "/grps/v1/health/live",
          "/grps/v1/health/ready", "/health"]  # fmt: skip


@pytest.mark.parametrize("method", ["GET", "HEAD"])
@pytest.mark.parametrize("path", PROBES)
def test_the_probes_are_open_without_a_key(http: httpx.Client, method: str, path: str) -> None:
    """HEAD as GET (RFC 9110 §9.3.2): a probe sending HEAD is answered without a key too."""
    assert http.request(method, path).status_code == 200
    assert http.request(method, path, headers=bearer(WRONG)).status_code == 200


@pytest.mark.parametrize("path", ["/v2/models/half_plus_two", "/metrics", "/v1/models"])
def test_head_on_a_keyed_route_needs_the_key_as_get_does(http: httpx.Client, path: str) -> None:
    for method in ("GET", "HEAD"):
        refused = http.request(method, path)
        assert (refused.status_code, refused.headers["www-authenticate"]) == (401, "Bearer")
        assert http.request(method, path, headers=bearer(FLAG_KEY)).status_code == 200


@pytest.mark.parametrize("family", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_every_family_no_key_wrong_key_right_keys(
    http: httpx.Client, family: tuple[str, str, str, dict[str, Any] | None, Shape]
) -> None:
    name, method, path, doc, shape = family
    for headers in ({}, bearer(WRONG), {"x-api-key": WRONG}, {"authorization": f"Basic {WRONG}"}):
        refused = http.request(method, path, json=doc, headers=headers)
        assert refused.status_code == 401, (headers, refused.text)
        assert refused.headers["www-authenticate"] == "Bearer"
        if name != "metrics":
            assert shape(refused.json()), refused.text
        assert WRONG not in refused.text
    for headers in (bearer(FLAG_KEY), bearer(FILE_KEY), {"x-api-key": ENV_KEY},
                    {"authorization": f"bearer {ENV_KEY}"}):  # fmt: skip
        answered = http.request(method, path, json=doc, headers=headers)
        assert answered.status_code == 200, (name, answered.text)


def test_tritonclient_http_with_and_without_the_key(server: ServerProcess, pki: Pki) -> None:
    client = triton_http.InferenceServerClient(
        server.http_hostport, ssl=True, ssl_options={"ca_certs": str(pki.ca_pem)},
        ssl_context_factory=gevent.ssl.create_default_context,
    )  # fmt: skip
    try:
        assert client.is_server_live()  # a probe: open
        x = triton_http.InferInput("x", [1], "FP32")
        x.set_data_from_numpy(np.array([4.0], dtype=np.float32))
        with pytest.raises(triton_http.InferenceServerException, match="API key"):
            client.infer("half_plus_two", [x])
        result = client.infer("half_plus_two", [x], headers=bearer(FLAG_KEY))
        assert result.as_numpy("y").tolist() == [4.0]
    finally:
        client.close()


def test_the_openai_sdk_over_https(server: ServerProcess, pki: Pki) -> None:
    def sdk(key: str) -> openai.OpenAI:
        transport = httpx.Client(verify=pki.context(), timeout=TIMEOUT_S)
        return openai.OpenAI(
            base_url=server.http_url + "/v1", api_key=key, max_retries=0, http_client=transport
        )

    done = sdk(FILE_KEY).completions.create(model="tiny_llama", prompt="hi", max_tokens=2)
    assert done.choices[0].text
    with pytest.raises(openai.AuthenticationError) as caught:
        sdk(WRONG).completions.create(model="tiny_llama", prompt="hi", max_tokens=2)
    assert caught.value.code == "invalid_api_key"


def test_the_text_generation_client_over_https(
    server: ServerProcess, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca_pem))  # its requests/aiohttp trust our CA
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(pki.ca_pem))
    right = TgiClient(server.http_url, headers=bearer(ENV_KEY), timeout=int(TIMEOUT_S))
    assert right.generate("hi", max_new_tokens=2).generated_text is not None
    wrong = TgiClient(server.http_url, headers=bearer(WRONG), timeout=int(TIMEOUT_S))
    with pytest.raises(Exception, match="API key"):
        wrong.generate("hi", max_new_tokens=2)


def call(channel: grpc.Channel, path: str, request: Any, reply: Any, key: str | None) -> Any:
    stub = channel.unary_unary(
        path, request_serializer=lambda m: m.SerializeToString(), response_deserializer=reply
    )
    metadata = None if key is None else [("authorization", f"Bearer {key}")]
    return stub(request, timeout=TIMEOUT_S, metadata=metadata)


@pytest.mark.parametrize(("path", "request_", "reply"), [
    (OIP + "ServerLive", oip_pb.ServerLiveRequest(), oip_pb.ServerLiveResponse),
    (OIP + "ServerReady", oip_pb.ServerReadyRequest(), oip_pb.ServerReadyResponse),
    ("/grps.protos.v1.GrpsService/CheckLiveness", grps_pb2.GrpsMessage(), grps_pb2.GrpsMessage),
    ("/grps.protos.v1.GrpsService/CheckReadiness", grps_pb2.GrpsMessage(), grps_pb2.GrpsMessage),
    ("/grpc.health.v1.Health/Check", health_pb2.HealthCheckRequest(),
     health_pb2.HealthCheckResponse),
])  # fmt: skip
def test_the_grpc_probes_are_open(
    channel: grpc.Channel, path: str, request_: Any, reply: Any
) -> None:
    call(channel, path, request_, reply.FromString, None)


@pytest.mark.parametrize(("path", "request_", "reply"), [
    (OIP + "ModelMetadata", oip_pb.ModelMetadataRequest(name="half_plus_two"),
     oip_pb.ModelMetadataResponse),
    (OIP + "ModelReady", oip_pb.ModelReadyRequest(name="half_plus_two"),
     oip_pb.ModelReadyResponse),
    (OIP + "ServerMetadata", oip_pb.ServerMetadataRequest(), oip_pb.ServerMetadataResponse),
    ("/grps.protos.v1.GrpsService/Predict", grps_pb2.GrpsMessage(str_data="x"),
     grps_pb2.GrpsMessage),
])  # fmt: skip
def test_grpc_calls_no_key_wrong_key_right_keys(
    channel: grpc.Channel, path: str, request_: Any, reply: Any
) -> None:
    for key in (None, WRONG):
        with pytest.raises(grpc.RpcError) as caught:
            call(channel, path, request_, reply.FromString, key)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert WRONG not in (caught.value.details() or "")
    for key in (FLAG_KEY, FILE_KEY, ENV_KEY):
        call(channel, path, request_, reply.FromString, key)
    stub = channel.unary_unary(path, request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=reply.FromString)  # fmt: skip
    stub(request_, timeout=TIMEOUT_S, metadata=[("x-api-key", FLAG_KEY)])


def test_grpc_health_watch_needs_the_key(channel: grpc.Channel) -> None:
    """Check is a probe and open; Watch holds a stream open as long as its client likes, so it
    needs a key as every other call does."""
    watch = channel.unary_stream(
        "/grpc.health.v1.Health/Watch",
        request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
        response_deserializer=health_pb2.HealthCheckResponse.FromString,
    )
    for key in (None, WRONG):
        metadata = None if key is None else [("authorization", f"Bearer {key}")]
        with pytest.raises(grpc.RpcError) as caught:
            next(watch(health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S, metadata=metadata))
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    call = watch(
        health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S, metadata=[("x-api-key", FLAG_KEY)]
    )
    assert next(call).status == health_pb2.HealthCheckResponse.ServingStatus.SERVING
    call.cancel()


def test_grpcio_grps_stub_with_the_key(channel: grpc.Channel, tmp_path: Path) -> None:
    stub = generate_stubs(tmp_path).GrpsServiceStub(channel)
    reply = stub.Predict(grps_pb2.GrpsMessage(str_data="key"), timeout=TIMEOUT_S,
                         metadata=[("authorization", f"Bearer {FILE_KEY}")])  # fmt: skip
    assert reply.status.status == grps_pb2.Status.SUCCESS


def test_sighup_reads_the_key_file_again(
    server: ServerProcess, http: httpx.Client, channel: grpc.Channel, key_file: Path
) -> None:
    """A rotation: the file's old key stops working, its new one works; --api-key's and the
    environment's stay. A file left without a key keeps the keys in use."""
    url = "/v2/models/half_plus_two"
    key_file.write_text(f"{ROTATED}\n")
    server.proc.send_signal(signal.SIGHUP)
    eventually(lambda: http.get(url, headers=bearer(ROTATED)).status_code == 200)
    assert http.get(url, headers=bearer(FILE_KEY)).status_code == 401
    for key in (FLAG_KEY, ENV_KEY):
        assert http.get(url, headers=bearer(key)).status_code == 200
    request = oip_pb.ModelMetadataRequest(name="half_plus_two")
    call(channel, OIP + "ModelMetadata", request, oip_pb.ModelMetadataResponse.FromString, ROTATED)
    key_file.write_text("# emptied by mistake\n")
    server.proc.send_signal(signal.SIGHUP)
    eventually(lambda: any("API key reload failed" in line for line in server.lines))
    assert http.get(url, headers=bearer(ROTATED)).status_code == 200
    key_file.write_text(f"{FILE_KEY}\n")  # as the other tests of this module expect it
    server.proc.send_signal(signal.SIGHUP)
    eventually(lambda: http.get(url, headers=bearer(FILE_KEY)).status_code == 200)


def test_no_key_ever_reaches_the_log(server: ServerProcess, http: httpx.Client) -> None:
    """Last: after every request above, the log holds none of the keys, right or wrong."""
    http.get("/v2/models/nope", headers=bearer(WRONG))
    log = "\n".join(server.lines)
    for key in (FLAG_KEY, FILE_KEY, ENV_KEY, WRONG, ROTATED):
        assert key not in log
