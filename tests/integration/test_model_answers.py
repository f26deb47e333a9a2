"""A model's answer against the outputs it declares, on a real server.

An answer that does not fit (None, a missing output, complex numbers, the wrong rank, Python
objects) is a 500 naming the model, the output and what was wrong, over OIP REST
(tritonclient.http) and OIP gRPC (grpcio with the project's stubs); an answer that fits is served
as declared. A model's 5 MB exception message reaches no client whole, on any protocol. And a
client sending requests to those models beside a normal client leaves the normal client's
answers exactly what they are alone.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from rosettaserve.core.errors import MAX_MESSAGE_BYTES
from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from tests.conftest import TEST_MODELS
from tests.integration.oip_grpc_support import model_infer
from tests.serverproc import ServerProcess, served, start_server

TIMEOUT_S = 30.0
X = np.array([1.5, -2.0, 3.25], dtype=np.float32)
DOUBLED = (X * 2).tolist()
MODELS = {  # model name: class in tests/models/_answers_python/model.py
    "double": "Double",
    "double_in_float64": "DoubleInFloat64",
    "double_and_more": "DoubleAndMore",
    "returns_none": "ReturnsNone",
    "other_name": "OtherName",
    "complex": "Complex",
    "rank3": "Rank3",
    "objects": "Objects",
    "raises_5mb": "Raises5MB",
    "refuses_5mb": "Refuses5MB",
}
WRONG = {  # model: what its 500 says, after "model '<name>' version 1 "
    "returns_none": "returned None for output 'y'",
    "other_name": "did not return its declared output 'y' (it returned ['z'])",
    "complex": "returned output 'y', declared FP32, that holds complex numbers",
    "rank3": "returned output 'y' with shape [3, 1, 1], but declares [-1]",
    "objects": "returned output 'y', declared FP32, that holds Python objects",
}
FITTING = ["double_in_float64", "double_and_more"]
MARKER = " more characters)"
MODEL_YAML = """\
runtime: python
class: {cls}
inputs:
  - {{name: x, datatype: FP32, shape: [-1]}}
outputs:
  - {{name: y, datatype: FP32, shape: [-1]}}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("answers")
    source = TEST_MODELS / "_answers_python" / "model.py"
    for name, cls in MODELS.items():
        (repo / name).mkdir()
        shutil.copy(source, repo / name / "model.py")
        (repo / name / "model.yaml").write_text(MODEL_YAML.format(cls=cls))
    yield from served(start_server(repo))


# -- the two clients ---------------------------------------------------------------------------


def rest_infer(client: httpclient.InferenceServerClient, model: str) -> dict[str, Any]:
    """``model``'s answer to X over REST: output name -> (datatype, values)."""
    inp = httpclient.InferInput("x", list(X.shape), "FP32")
    inp.set_data_from_numpy(X, binary_data=False)
    result = client.infer(model, [inp])
    outputs = result.get_response()["outputs"]
    return {o["name"]: (o["datatype"], result.as_numpy(o["name"]).tolist()) for o in outputs}


def grpc_infer(server: ServerProcess, model: str) -> dict[str, Any]:
    """``model``'s answer to X over gRPC: output name -> (datatype, values)."""
    msg = pb.ModelInferRequest(model_name=model)
    msg.inputs.add(name="x", datatype="FP32", shape=list(X.shape)).contents.fp32_contents.extend(
        X.tolist()
    )
    reply = model_infer(server.grpc_address, msg, timeout=TIMEOUT_S)
    answer = {}
    for i, out in enumerate(reply.outputs):
        assert out.datatype == "FP32"
        values = np.frombuffer(reply.raw_output_contents[i], np.float32).tolist()
        answer[out.name] = (out.datatype, values or list(out.contents.fp32_contents))
    return answer


def grpc_error(server: ServerProcess, model: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        grpc_infer(server, model)
    return info.value


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(server.http_hostport, network_timeout=TIMEOUT_S)
    yield client
    client.close()


# -- answers that do not fit, and answers that do ------------------------------------------------


@pytest.mark.parametrize("model", list(WRONG))
def test_an_answer_that_does_not_fit_is_a_500_over_rest(
    client: httpclient.InferenceServerClient, model: str
) -> None:
    with pytest.raises(InferenceServerException) as info:
        rest_infer(client, model)
    assert info.value.status() == "500"
    assert (info.value.message() or "").startswith(f"model '{model}' version 1 " + WRONG[model])


@pytest.mark.parametrize("model", list(WRONG))
def test_an_answer_that_does_not_fit_is_internal_over_grpc(
    server: ServerProcess, model: str
) -> None:
    error = grpc_error(server, model)
    assert error.code() is grpc.StatusCode.INTERNAL
    assert (error.details() or "").startswith(f"model '{model}' version 1 " + WRONG[model])


@pytest.mark.parametrize("model", FITTING)
def test_an_answer_that_fits_is_served_as_declared(
    server: ServerProcess, client: httpclient.InferenceServerClient, model: str
) -> None:
    """float64 values for an FP32 output are served as FP32; an undeclared output is not."""
    expected = {"y": ("FP32", DOUBLED)}
    assert rest_infer(client, "double") == expected
    assert rest_infer(client, model) == expected
    assert grpc_infer(server, model) == expected


# -- bounded error messages ------------------------------------------------------------------------


def assert_bounded(message: str, start: str) -> None:
    assert message.startswith(start)
    assert message.endswith(MARKER)
    assert len(message.encode()) <= MAX_MESSAGE_BYTES + 64


def test_a_5_mb_exception_message_is_bounded_over_oip_rest(
    client: httpclient.InferenceServerClient,
) -> None:
    for model, status, start in (
        ("raises_5mb", "500", "RuntimeError: rrrr"),
        ("refuses_5mb", "400", "vvvv"),
    ):
        with pytest.raises(InferenceServerException) as info:
            rest_infer(client, model)
        assert info.value.status() == status
        assert_bounded(info.value.message() or "", start)


def test_a_5_mb_exception_message_is_bounded_over_oip_grpc(server: ServerProcess) -> None:
    """In the grpc-message trailer, where a client refuses metadata over 8 KiB (today's 5 MB
    came back as RESOURCE_EXHAUSTED "received metadata size exceeds hard limit")."""
    error = grpc_error(server, "raises_5mb")
    assert error.code() is grpc.StatusCode.INTERNAL
    assert_bounded(error.details() or "", "RuntimeError: rrrr")


def http_error(server: ServerProcess, path: str, doc: dict[str, Any], status: int) -> Any:
    reply = httpx.post(server.http_url + path, json=doc, timeout=TIMEOUT_S)
    assert reply.status_code == status, reply.text[:300]
    assert len(reply.content) <= MAX_MESSAGE_BYTES + 256
    return reply.json()


def test_a_5_mb_exception_message_is_bounded_over_tf_serving_and_grps(
    server: ServerProcess,
) -> None:
    tfs = http_error(server, "/v1/models/raises_5mb:predict", {"instances": X.tolist()}, 500)
    assert_bounded(tfs["error"], "RuntimeError: rrrr")
    grps = http_error(
        server, "/grps/v1/infer/predict?model=raises_5mb", {"ndarray": X.tolist()}, 500
    )
    assert grps["status"]["code"] == 500
    assert_bounded(grps["status"]["msg"], "RuntimeError: rrrr")


LLM_FAMILIES = [  # a 1 MB model name, echoed in each family's 404
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/completions", {"prompt": "hi"}),
    ("/infer", {"inputs": "hi"}),
]


@pytest.mark.parametrize(("path", "doc"), LLM_FAMILIES, ids=[p for p, _ in LLM_FAMILIES])
def test_an_echoed_1_mb_model_name_is_bounded_over_the_llm_families(
    server: ServerProcess, path: str, doc: dict[str, Any]
) -> None:
    name = "m" * 1_000_000
    body = http_error(server, path, {**doc, "model": name}, 404)
    error = body["error"]
    message = error["message"] if isinstance(error, dict) else error
    assert MARKER in message


# -- a neighbour's answers ---------------------------------------------------------------------


def test_wrong_answers_beside_a_normal_client_leave_its_answers_as_they_are_alone(
    server: ServerProcess,
) -> None:
    """One client asks every model whose answer does not fit (and the 5 MB exceptions) over
    both protocols, as fast as it can; a normal client's answers in the meantime are exactly
    its answers alone, and every wrong answer stays a 500 saying what it was."""
    normal = httpclient.InferenceServerClient(server.http_hostport, network_timeout=TIMEOUT_S)
    attacker = httpclient.InferenceServerClient(server.http_hostport, network_timeout=TIMEOUT_S)
    alone_rest, alone_grpc = rest_infer(normal, "double"), grpc_infer(server, "double")
    assert alone_rest == alone_grpc == {"y": ("FP32", DOUBLED)}
    started, stop = threading.Event(), threading.Event()
    refusals: list[str] = []

    def refusal(call: Callable[[], object]) -> str:
        try:
            return f"answered: {call()}"
        except InferenceServerException as exc:
            return exc.status() or ""
        except grpc.RpcError as exc:
            return str(exc.code())

    def attack() -> None:
        bad = [*WRONG, "raises_5mb", "refuses_5mb"]
        while not stop.is_set():
            for model in bad:
                refusals.append(refusal(lambda m=model: rest_infer(attacker, m)))
                refusals.append(refusal(lambda m=model: grpc_infer(server, m)))
                started.set()

    thread = threading.Thread(target=attack, daemon=True)
    thread.start()
    try:
        assert started.wait(TIMEOUT_S)
        for _ in range(15):
            assert rest_infer(normal, "double") == alone_rest
            assert grpc_infer(server, "double") == alone_grpc
    finally:
        stop.set()
        thread.join(TIMEOUT_S)
        normal.close()
        attacker.close()
    assert refusals
    assert set(refusals) <= {"500", "400", "StatusCode.INTERNAL", "StatusCode.INVALID_ARGUMENT"}
    assert httpx.get(server.http_url + "/v2/health/ready", timeout=TIMEOUT_S).status_code == 200
