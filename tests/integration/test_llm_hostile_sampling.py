"""The worst sampling values a client can send, on every family, while a normal client streams.

Two neighbours stream from the OpenAI completions route (one greedy, one seeded sampling); while
they run, an attacker sends every numeric sampling field of one family at once at each extreme
(1e-300, 5e-324, 1e308, -0.0, 2**63, ...; NaN and Infinity where the wire can carry them), on
OpenAI chat and completions (the openai SDK), TGI, vLLM, Triton generate, MindIE (HTTP) and OIP
(REST, and gRPC through tritonclient). Each attack is answered 200 or the family's 400, never a
5xx; every answer arrives before the neighbours end (so they shared the engine's steps); and the
neighbours' texts are exactly what they are alone.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import httpx
import openai
import orjson
import pytest

from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from tests.conftest import EXAMPLES
from tests.integration.oip_grpc_support import model_infer
from tests.integration.test_llm_bad_input import (
    mindie_shape,
    openai_shape,
    tgi_shape,
    triton_shape,
)
from tests.sampling_readers import numeric_keys
from tests.serverproc import ServerProcess, served, start_server

NEIGHBOUR_TOKENS = 240
NEIGHBOURS = {
    "greedy": {"prompt": "The quick brown", "temperature": 0},
    "seeded": {"prompt": "Once upon a time", "temperature": 0.8, "seed": 7, "top_p": 0.95},
}
EXTREMES: list[Any] = [1e-300, 5e-324, 1e308, -0.0, 2**63, 10**30]
NON_FINITE = [float("nan"), float("-inf")]
ATTACK_TOKENS = 3
HI: Any = [{"role": "user", "content": "hi"}]
Attack = Callable[[httpx.Client, dict[str, Any]], tuple[int, Any]]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("llm_hostile_repo")
    shutil.copytree(EXAMPLES / "tiny_llama", repo / "tiny_llama")
    yield from served(start_server(repo))


class Neighbour(threading.Thread):
    """A normal client: the same streamed completion, again and again back to back until
    ``stop`` is set; the text of each run (an error event ends a run's text with it)."""

    def __init__(self, url: str, doc: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.doc = {"model": "tiny_llama", "max_tokens": NEIGHBOUR_TOKENS, "ignore_eos": True}
        self.doc |= {**doc, "stream": True}
        self.streaming, self.stop = threading.Event(), threading.Event()
        self.texts: list[str] = []

    def run(self) -> None:
        try:
            with httpx.Client(base_url=self.url, timeout=120) as client:
                while not self.texts or not self.stop.is_set():
                    self.texts.append(self.once(client))
        finally:
            self.streaming.set()  # (a failure to start is not waited for)

    def once(self, client: httpx.Client) -> str:
        text = ""
        with client.stream("POST", "/v1/completions", content=orjson.dumps(self.doc)) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    event = json.loads(line.removeprefix("data: "))
                    if "error" in event:
                        return f"{text}<error: {event['error']}>"
                    text += "".join(c["text"] for c in event.get("choices", []))
                    self.streaming.set()
        return text


def alone(url: str) -> dict[str, str]:
    out = {}
    for name, doc in NEIGHBOURS.items():
        neighbour = Neighbour(url, doc)
        neighbour.stop.set()  # one run
        neighbour.start()
        neighbour.join()
        (out[name],) = neighbour.texts
    return out


@pytest.fixture(scope="module")
def reference(server: ServerProcess) -> dict[str, str]:
    texts = alone(server.http_url)
    assert all(len(t) > NEIGHBOUR_TOKENS for t in texts.values())  # real text, every token
    return texts


# -- one attack per family: a request with ``fields`` as that family carries them -------------


def raw(client: httpx.Client, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    """json.dumps writes NaN and Infinity as such and integers of any size, as an attacker can."""
    reply = client.post(
        path, content=json.dumps(body), headers={"content-type": "application/json"}
    )
    return reply.status_code, reply.json()


def openai_sdk(chat: bool) -> Attack:
    """Through the openai SDK (``extra_body``), but for NaN and the infinities, which it cannot
    write: those go as the bytes an attacker would send."""
    path = "/v1/chat/completions" if chat else "/v1/completions"

    def attack(client: httpx.Client, fields: dict[str, Any]) -> tuple[int, Any]:
        extra = {"max_tokens": ATTACK_TOKENS, **fields}
        if not finite(fields):
            prompt = {"messages": HI} if chat else {"prompt": "hi"}
            return raw(client, path, {"model": "tiny_llama", **prompt, **extra})
        base = str(client.base_url).rstrip("/") + "/v1"
        sdk = sdk_client(base)
        try:
            if chat:
                sdk.chat.completions.create(model="tiny_llama", messages=HI, extra_body=extra)
            else:
                sdk.completions.create(model="tiny_llama", prompt="hi", extra_body=extra)
        except openai.APIStatusError as exc:
            return exc.status_code, exc.response.json()
        return 200, None

    return attack


_SDK = threading.local()  # one openai client per sending thread (making one costs ~50 ms)


def sdk_client(base: str) -> openai.OpenAI:
    if getattr(_SDK, "base", None) != base:
        _SDK.base = base
        _SDK.client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0)
    client: openai.OpenAI = _SDK.client
    return client


def finite(fields: dict[str, Any]) -> bool:
    try:
        json.dumps(fields, allow_nan=False)
    except ValueError:
        return False
    return True


def tgi(client: httpx.Client, fields: dict[str, Any]) -> tuple[int, Any]:
    parameters = {"max_new_tokens": ATTACK_TOKENS, "do_sample": True, **fields}
    return raw(client, "/generate", {"inputs": "hi", "parameters": parameters})


def vllm(client: httpx.Client, fields: dict[str, Any]) -> tuple[int, Any]:
    return raw(client, "/generate", {"prompt": "hi", "max_tokens": ATTACK_TOKENS, **fields})


def triton(client: httpx.Client, fields: dict[str, Any]) -> tuple[int, Any]:
    body = {"text_input": "hi", "max_tokens": ATTACK_TOKENS, "parameters": fields}
    return raw(client, "/v2/models/tiny_llama/generate", body)


def mindie(client: httpx.Client, fields: dict[str, Any]) -> tuple[int, Any]:
    parameters = {"max_new_tokens": ATTACK_TOKENS, "do_sample": True, **fields}
    return raw(client, "/infer", {"inputs": "hi", "parameters": parameters})


def oip_rest(client: httpx.Client, fields: dict[str, Any]) -> tuple[int, Any]:
    tensor = {"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["hi"]}
    parameters = {"max_tokens": ATTACK_TOKENS, **fields}
    return raw(
        client, "/v2/models/tiny_llama/infer", {"inputs": [tensor], "parameters": parameters}
    )


def oip_grpc(address: str) -> Attack:
    """OIP gRPC with grpcio and the project's stubs (tritonclient.grpc cannot share this
    process with kserve's stubs: both register package ``inference``)."""

    def attack(client: httpx.Client, fields: dict[str, Any]) -> tuple[int, Any]:
        msg = pb.ModelInferRequest(model_name="tiny_llama")
        msg.inputs.add(
            name="text_input", datatype="BYTES", shape=[1]
        ).contents.bytes_contents.append(b"hi")
        for key, value in {"max_tokens": ATTACK_TOKENS, **fields}.items():
            set_parameter(msg.parameters[key], value)
        try:
            model_infer(address, msg)
        except grpc.RpcError as exc:
            code = exc.code()
            return (400 if code == grpc.StatusCode.INVALID_ARGUMENT else 500), exc.details()
        return 200, None

    return attack


def set_parameter(parameter: pb.InferParameter, value: Any) -> None:
    """``value`` in the field tritonclient would put it in."""
    if isinstance(value, bool):
        parameter.bool_param = value
    elif isinstance(value, int):
        parameter.int64_param = value
    elif isinstance(value, float):
        parameter.double_param = value
    else:
        parameter.string_param = str(value)


def shape_of(shape: Callable[[Any], bool]) -> Callable[[dict[str, Any], Any], bool]:
    return lambda fields, body: shape(body)


def vllm_shape(fields: dict[str, Any], body: Any) -> bool:
    """A body that is not JSON (NaN) cannot say it is vLLM's: /generate answers it as TGI's."""
    return (mindie_shape if finite(fields) else tgi_shape)(body)


FAMILIES: dict[str, tuple[str, Callable[[dict[str, Any], Any], bool]]] = {
    # attack name: (the reader's family in tests/sampling_readers.py, its 400's shape)
    "openai-chat": ("openai-chat", shape_of(openai_shape)),
    "openai-completions": ("openai-completions", shape_of(openai_shape)),
    "tgi": ("tgi", shape_of(tgi_shape)),
    "vllm": ("vllm", vllm_shape),
    "triton": ("triton", shape_of(triton_shape)),
    "mindie": ("mindie", shape_of(mindie_shape)),
    "oip-rest": ("oip", lambda fields, doc: isinstance(doc.get("error"), str)),
    "oip-grpc": ("oip", lambda fields, message: bool(message)),
}


def attacks(family: str) -> list[dict[str, Any]]:
    """Every numeric field alone at every extreme, then all of them at once at each."""
    keys = numeric_keys(FAMILIES[family][0])
    values = EXTREMES + NON_FINITE
    if family == "oip-grpc":  # its parameters are int64 or double: no wider integer travels
        values = [v for v in values if not isinstance(v, int) or -(2**63) <= v < 2**63]
    docs = [{key: value} for key in keys for value in values]
    return docs + [dict.fromkeys(keys, value) for value in values]


def attacker(server: ServerProcess, family: str) -> Attack:
    named: dict[str, Attack] = {
        "openai-chat": openai_sdk(chat=True),
        "openai-completions": openai_sdk(chat=False),
        "tgi": tgi,
        "vllm": vllm,
        "triton": triton,
        "mindie": mindie,
        "oip-rest": oip_rest,
        "oip-grpc": oip_grpc(server.grpc_address),
    }
    return named[family]


Answer = tuple[dict[str, Any], int, Any]  # the fields sent, the status, the body


def beside_neighbours(
    server: ServerProcess, attack: Attack, docs: list[dict[str, Any]]
) -> tuple[dict[str, set[str]], list[Answer]]:
    """Start the neighbours; once both stream, send ``docs`` (eight at a time) while they go on
    streaming, run after run. The texts of the neighbours' runs, and the answers."""
    neighbours = {n: Neighbour(server.http_url, doc) for n, doc in NEIGHBOURS.items()}
    for neighbour in neighbours.values():
        neighbour.start()
    for neighbour in neighbours.values():
        assert neighbour.streaming.wait(60)

    def send(fields: dict[str, Any]) -> Answer:
        with httpx.Client(base_url=server.http_url, timeout=60) as client:
            return (fields, *attack(client, fields))

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(send, docs))
    for neighbour in neighbours.values():
        neighbour.stop.set()
    for neighbour in neighbours.values():
        neighbour.join(120)
    return {n: set(neighbour.texts) for n, neighbour in neighbours.items()}, answers


@pytest.mark.parametrize("family", FAMILIES)
def test_hostile_sampling_values_leave_the_neighbours_answers_alone(
    server: ServerProcess, reference: dict[str, str], family: str
) -> None:
    attack, shape = attacker(server, family), FAMILIES[family][1]
    texts, answers = beside_neighbours(server, attack, attacks(family))
    assert texts == {n: {text} for n, text in reference.items()}
    assert [(f, s) for f, s, _ in answers if s not in (200, 400)] == []
    assert [(f, body) for f, s, body in answers if s == 400 and not shape(f, body)] == []
    assert any(s == 200 for _, s, _ in answers)  # the values a field's range holds were served
