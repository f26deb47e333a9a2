"""One client's heavy request beside other clients' (issue 34, item 4): the event loop answers
them while it is worked on, and what cannot fit is refused before any work.

Tested by order, never by time: a liveness probe and a small inference sent once the heavy
request is being worked on are answered before it, and the small inference's answer is
exactly what it is alone. Over HTTP/1.1 "being worked on" is seen from outside: the server
has spent ``WORKING_S`` of CPU time since the heavy request was sent. Over gRPC the probe goes
on the heavy call's own connection, right behind it: the server reads it only once the heavy
call has started. The heavy requests name a model that does not exist where the work comes
before the model is looked up, so that the heavy request's answer follows its work at once.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from tests.conftest import EXAMPLES, add_identity_models
from tests.integration.h2client import H2Client, grpc_frame
from tests.serverproc import ServerProcess, served, start_server, wait_for

WORKING_S = 0.1  # CPU seconds the server spends on a heavy request before the probes go
MANY = 4 * 1024 * 1024  # BYTES elements: the most one tensor takes (core/codec.py)
INFER = "/inference.GRPCInferenceService/ModelInfer"
LIVE = "/inference.GRPCInferenceService/ServerLive"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("heavy_repo")
    add_identity_models(repo)
    for name in list(repo.iterdir()):
        if name.name not in ("identity_fp32", "identity_bytes"):
            shutil.rmtree(name)
    shutil.copytree(EXAMPLES / "tiny_llama", repo / "tiny_llama")
    yield from served(start_server(repo))


def cpu_seconds(pid: int) -> float:
    """User and system time of the process, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def post(server: ServerProcess, path: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    with httpx.Client(base_url=server.http_url, timeout=300) as client:
        return client.post(path, content=body, headers=headers)


SMALL = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 3], "data": [1.5, -2, 7]}]}


def small_inference(server: ServerProcess) -> Any:
    response = post(server, "/v2/models/identity_fp32/infer", json.dumps(SMALL).encode(), {})
    assert response.status_code == 200, response.text
    return response.json()


def probe(server: ServerProcess) -> int:
    with httpx.Client(base_url=server.http_url, timeout=300) as client:
        return client.get("/v2/health/live").status_code


def beside(server: ServerProcess, heavy: Callable[[], httpx.Response]) -> tuple[list[str], Any]:
    """Send ``heavy``; once the server works on it, a probe and a small inference. The order in
    which the three were answered, the heavy answer, the small inference's answer."""
    alone = small_inference(server)
    done: list[str] = []
    answers: dict[str, Any] = {}

    def run(name: str, fn: Callable[[], Any]) -> None:
        answers[name] = fn()
        done.append(name)

    before = cpu_seconds(server.proc.pid)
    heavy_thread = threading.Thread(target=run, args=("heavy", heavy))
    heavy_thread.start()
    wait_for(lambda: cpu_seconds(server.proc.pid) >= before + WORKING_S or "heavy" in done, 120)
    others = [
        threading.Thread(target=run, args=("probe", lambda: probe(server))),
        threading.Thread(target=run, args=("small", lambda: small_inference(server))),
    ]
    for thread in others:
        thread.start()
    for thread in [*others, heavy_thread]:
        thread.join(300)
    assert answers["probe"] == 200
    assert answers["small"] == alone  # the neighbour's answer is what it is alone
    return done, answers["heavy"]


def test_a_gzip_bomb_is_inflated_while_others_are_answered(server: ServerProcess) -> None:
    bomb = gzip.compress(gzip.compress(b"\0" * (256 * 1024 * 1024 + 1), 9), 9)  # < 2 KiB

    def heavy() -> httpx.Response:
        headers = {"content-encoding": "gzip, gzip", "content-type": "application/json"}
        return post(server, "/v2/models/identity_fp32/infer", bomb, headers)

    order, answer = beside(server, heavy)
    assert answer.status_code == 413
    assert "inflates to more than the limit" in answer.json()["error"]
    assert order[-1] == "heavy", order


def bytes_body(count: int) -> tuple[bytes, dict[str, str]]:
    blob = b"\1\0\0\0x" * count
    tensor = {"name": "INPUT0", "datatype": "BYTES", "shape": [1, count]}
    tensor["parameters"] = {"binary_data_size": len(blob)}
    head = json.dumps({"inputs": [tensor]}).encode()
    return head + blob, {"inference-header-content-length": str(len(head))}


def test_a_large_bytes_tensor_is_decoded_while_others_are_answered(
    server: ServerProcess,
) -> None:
    body, headers = bytes_body(MANY)

    def heavy() -> httpx.Response:  # decoded, then refused: no such model
        return post(server, "/v2/models/no_such_model/infer", body, headers)

    order, answer = beside(server, heavy)
    assert answer.status_code == 404, answer.text
    assert order[-1] == "heavy", order


def test_bytes_past_the_limit_are_refused_before_decoding(server: ServerProcess) -> None:
    """A 32 MB body of 8 M empty elements: refused for its count, whatever it holds."""
    count = 2 * MANY
    blob = b"\0\0\0\0" * count
    tensor = {"name": "INPUT0", "datatype": "BYTES", "shape": [1, count]}
    tensor["parameters"] = {"binary_data_size": len(blob)}
    head = json.dumps({"inputs": [tensor]}).encode()
    headers = {"inference-header-content-length": str(len(head))}
    answer = post(server, "/v2/models/identity_bytes/infer", head + blob, headers)
    assert answer.status_code == 400
    assert f"has {count} elements; at most {MANY}" in answer.json()["error"]


def test_a_large_bytes_tensor_is_served_whole(server: ServerProcess) -> None:
    """Decoded and answered on the request-work threads, the tensor comes back unchanged."""
    count = 20_000
    body, headers = bytes_body(count)
    doc = json.loads(body[: int(headers["inference-header-content-length"])])
    doc["outputs"] = [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]
    head = json.dumps(doc).encode()
    blob = body[int(headers["inference-header-content-length"]) :]
    headers = {"inference-header-content-length": str(len(head))}
    answer = post(server, "/v2/models/identity_bytes/infer", head + blob, headers)
    assert answer.status_code == 200, answer.text
    length = int(answer.headers["inference-header-content-length"])
    assert answer.content[length:] == blob


def test_a_long_prompt_is_tokenized_while_others_are_answered(server: ServerProcess) -> None:
    """TGI's truncate takes a prompt of any length, so it is tokenized whole; asking for more
    tokens than the window holds then fails at once, right after the tokenizing."""
    prompt = "hello world " * (2_000_000 // 12)
    body = {"inputs": prompt, "parameters": {"truncate": 16, "max_new_tokens": 100_000}}

    def heavy() -> httpx.Response:
        return post(server, "/generate", json.dumps(body).encode(), {})

    order, answer = beside(server, heavy)
    assert answer.json()["error_type"] == "validation", answer.text
    assert "new tokens fit" in answer.text
    assert order[-1] == "heavy", order


@pytest.fixture(scope="module")
def openai(server: ServerProcess) -> Iterator[OpenAI]:
    with OpenAI(base_url=server.http_url + "/v1", api_key="none", max_retries=0) as client:
        yield client


def completion(openai: OpenAI) -> Any:
    return openai.completions.create(
        model="tiny_llama", prompt="Once upon", max_tokens=12, extra_body={"ignore_eos": True}
    )


def test_a_prompt_that_cannot_fit_is_refused_before_tokenizing(
    server: ServerProcess, openai: OpenAI
) -> None:
    """11 MB of prompt, as a completion and as a chat, beside a client's inference and
    completion. (The completion's text is not compared: the engine's greedy text varies from
    run to run by itself at 1e5cfea; the inference's answer is.)"""
    alone = small_inference(server)
    prompt = "hello world " * (11_000_000 // 12)
    answers: dict[str, Any] = {}
    requests = {
        "completion": ("/v1/completions", {"model": "tiny_llama", "prompt": prompt}),
        "chat": (
            "/v1/chat/completions",
            {"model": "tiny_llama", "messages": [{"role": "user", "content": prompt}]},
        ),
    }

    def run(name: str) -> None:
        path, doc = requests[name]
        answers[name] = post(server, path, json.dumps(doc).encode(), {})

    threads = [threading.Thread(target=run, args=(name,)) for name in requests]
    for thread in threads:
        thread.start()
    beside_them = small_inference(server)
    done = completion(openai)
    for thread in threads:
        thread.join(300)
    assert beside_them == alone
    assert done.choices[0].finish_reason == "length"
    assert done.usage is not None
    assert done.usage.completion_tokens == 12
    for name in requests:
        answer = answers[name]
        assert answer.status_code == 400, (name, answer.text)
        message = answer.json()["error"]["message"]
        assert "characters; this model's context window of 512 tokens holds at most" in message


# -- gRPC: the probe right behind the heavy call, on its connection ------------------------------


def behind(server: ServerProcess, path: str, message: bytes, extra: list[tuple[str, str]]) -> Any:
    """The heavy call, then ServerLive on the same connection; the order they ended in, and the
    heavy call's reply."""
    with H2Client(server.grpc_address, timeout=300) as client:
        heavy = client.start(path, extra)
        client.send(heavy, message)
        live = client.start(LIVE)
        client.send(live, grpc_frame(b""))
        client.read_until(lambda: client.replies[heavy].done and client.replies[live].done)
        ended = [
            e.stream_id
            for e in client.events
            if type(e).__name__ in ("StreamEnded", "StreamReset") and e.stream_id in (heavy, live)
        ]
        assert client.replies[live].grpc_status == 0
        order = ["heavy" if s == heavy else "probe" for s in ended]
        return order, client.replies[heavy]


def test_a_compressed_grpc_bomb_is_inflated_while_the_connection_goes_on(
    server: ServerProcess,
) -> None:
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024), 9)  # zeros: not a valid message either
    framed = b"\x01" + len(bomb).to_bytes(4, "big") + bomb
    order, reply = behind(server, INFER, framed, [("grpc-encoding", "gzip")])
    assert reply.grpc_status == 3, reply.describe()  # INVALID_ARGUMENT: read, then refused
    assert order == ["probe", "heavy"]


def test_large_grpc_bytes_are_decoded_while_the_connection_goes_on(
    server: ServerProcess,
) -> None:
    request = pb.ModelInferRequest(model_name="no_such_model")
    request.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, MANY])
    request.raw_input_contents.append(b"\1\0\0\0x" * MANY)
    order, reply = behind(server, INFER, grpc_frame(request.SerializeToString()), [])
    assert reply.grpc_status == 5, reply.describe()  # NOT_FOUND, once decoded
    assert order == ["probe", "heavy"]


def test_many_grpc_bytes_contents_are_read_while_the_connection_goes_on(
    server: ServerProcess,
) -> None:
    request = pb.ModelInferRequest(model_name="no_such_model")
    tensor = request.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, MANY // 4])
    tensor.contents.bytes_contents.extend([b"x"] * (MANY // 4))
    order, reply = behind(server, INFER, grpc_frame(request.SerializeToString()), [])
    assert reply.grpc_status == 5, reply.describe()
    assert order == ["probe", "heavy"]
