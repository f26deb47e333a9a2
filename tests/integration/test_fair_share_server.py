"""Fair share in a real server: a flood from one API key does not starve another, weights and
priorities (X-Priority on REST and gRPC, OIP's priority parameter) decide the order, and hostile
priorities get a 400 saying why.

The gated model (one row a batch) is held on a first request; the others queue one by one (each
seen queued in /metrics before the next is sent, so their arrival order is known); then the
model lets go and its log tells the order they ran in. Orders, never times."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from tests.integration.gated import Gate, gated_model, in_threads, model_infer, wait_for
from tests.serverproc import ServerProcess, start_server, stop_cleanly

KEY_A, KEY_B = "flooding-key-a1", "quiet-key-b2"


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gate]:
    repo = tmp_path_factory.mktemp("fair")
    gated_model(repo, "gated", "max_batch_size: 1\ndynamic_batching: {}\n")
    keys = repo / "keys.txt"
    keys.write_text(f"{KEY_A}\n{KEY_B} weight=2\n")
    server = start_server(repo, "--api-key-file", str(keys))
    yield Gate(server, repo, "gated")
    (repo / "hold").unlink(missing_ok=True)
    stop_cleanly(server)


def queued(server: ServerProcess) -> int:
    text = httpx.get(server.http_url + "/metrics", headers={"x-api-key": KEY_A}).text
    prefix = 'rosettaserve_queued_requests{model="gated",version="1"} '
    line = next((ln for ln in text.splitlines() if ln.startswith(prefix)), prefix + "0")
    return int(line.rsplit(" ", 1)[1])


def rest(
    server: ServerProcess, value: float, key: str, headers: dict[str, str] | None = None, **p: Any
) -> httpx.Response:
    tensor = {"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [value]}
    body: dict[str, Any] = {"inputs": [tensor]}
    if p:
        body["parameters"] = p
    headers = {"x-api-key": key, **(headers or {})}
    url = f"{server.http_url}/v2/models/gated/infer"
    return httpx.post(url, json=body, headers=headers, timeout=60)


def grpc_call(server: ServerProcess, value: float, metadata: list[tuple[str, str]]) -> Any:
    msg = pb.ModelInferRequest(model_name="gated")
    tensor = msg.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1])
    tensor.contents.fp32_contents.append(value)
    with grpc.insecure_channel(server.grpc_address) as channel:
        return model_infer(channel)(msg, metadata=metadata, timeout=60)


def run_order(gate: Gate, calls: list[Callable[[], Any]]) -> list[float]:
    """Hold the model on a first request, queue ``calls`` one after the other, let go: the
    values the model ran after the first, in the order it ran them."""
    gate.hold.touch()
    before = len(gate.lines())
    threads, results = in_threads([lambda: rest(gate.server, -1.0, KEY_A)])
    wait_for(lambda: len(gate.lines()) == before + 1, "the first request running")
    for n, call in enumerate(calls, 1):
        started, got = in_threads([call])
        threads += started
        results += got
        wait_for(lambda n=n: queued(gate.server) == n, f"{n} requests queued")  # type: ignore[misc]
    gate.hold.unlink()
    for thread in threads:
        thread.join(60)
    for result in results:
        assert getattr(result, "status_code", 200) == 200, result.text
    return [float(line.split(":")[1]) for line in gate.lines()[before + 1 :]]


def test_a_flooding_key_does_not_starve_a_quiet_one_and_weights_count(gate: Gate) -> None:
    server = gate.server
    flood = [lambda v=v: rest(server, v, KEY_A) for v in range(1, 9)]
    quiet = [lambda v=v: rest(server, v, KEY_B) for v in (101, 102, 103)]
    order = run_order(gate, flood + quiet)
    # first come first served would run 1..8, then 101..103; B (weight 2) gets two turns to
    # A's one from when it arrives
    assert order == [101, 102, 1, 103, 2, 3, 4, 5, 6, 7, 8]


def test_priorities_of_every_kind_go_first(gate: Gate) -> None:
    server = gate.server
    calls = [
        lambda: rest(server, 1, KEY_A),
        lambda: rest(server, 2, KEY_A, {"X-Priority": "5"}),  # later than the default
        lambda: grpc_call(server, 3, [("x-api-key", KEY_A), ("x-priority", "-1")]),
        lambda: rest(server, 4, KEY_A, priority=1),  # OIP: Triton's highest level
        lambda: rest(server, 5, KEY_A),
    ]
    assert run_order(gate, calls) == [4, 3, 1, 5, 2]


@pytest.mark.parametrize(
    ("headers", "parameters", "says"),
    [
        ({"X-Priority": "high"}, {}, "the X-Priority header must be a whole number"),
        ({"X-Priority": str(2**40)}, {}, "must be in [-2147483648, 2147483647]"),
        ({}, {"priority": -1}, "request parameter 'priority' must be a Triton priority level"),
        ({}, {"priority": "1"}, "request parameter 'priority' must be a Triton priority level"),
    ],
)
def test_a_hostile_priority_is_a_400_saying_why(
    gate: Gate, headers: dict[str, str], parameters: dict[str, Any], says: str
) -> None:
    reply = rest(gate.server, 1, KEY_A, headers, **parameters)
    assert reply.status_code == 400
    assert says in reply.json()["error"]


def test_a_hostile_grpc_priority_is_invalid_argument(gate: Gate) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        grpc_call(gate.server, 1, [("x-api-key", KEY_A), ("x-priority", "1.5")])
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "x-priority" in caught.value.details().lower()


def test_the_weights_of_a_key_file_are_checked_at_start(tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("some-key weight=heavy\n")
    with pytest.raises(RuntimeError, match="line 1: after the key, only weight=W"):
        start_server(tmp_path, "--api-key-file", str(keys), wait_ready=False)
