"""Models cannot take each other down: each model version runs on execution instances of its own
(model.yaml ``instances``), a version whose every instance is stuck past its request timeout
reports not ready and says why, ``isolation: process`` kills the worker of a call that timed
out, and SIGTERM exits after ``--drain-grace`` whatever a model is doing."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from rosettaserve.server import exit_backstop
from tests.conftest import TEST_MODELS
from tests.integration.gated import in_threads, wait_for
from tests.integration.logs_support import wait_for_lines
from tests.serverproc import ServerProcess, inflight, start_server

DRAIN_GRACE_S = 2.0
EXIT_MARGIN_S = 15.0  # on top of the drain grace: a hang guard, not a measure of speed
CLIENT_TIMEOUT_S = 30.0


def ready_over_grpc(address: str, model: str) -> bool:
    """ModelReady over gRPC with the project's own stubs (tritonclient.grpc cannot share a
    process with kserve: both register package ``inference``; its suite is tests_tritongrpc)."""
    with grpc.insecure_channel(address) as channel:
        reply = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelReady",
            request_serializer=pb.ModelReadyRequest.SerializeToString,
            response_deserializer=pb.ModelReadyResponse.FromString,
        )(pb.ModelReadyRequest(name=model), timeout=30)
    return bool(reply.ready)


def body(**parameters: Any) -> dict[str, Any]:
    tensor = {"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1, 2]}
    return {"inputs": [tensor], "parameters": parameters}


def infer(server: ServerProcess, model: str, **parameters: Any) -> httpx.Response:
    url = f"{server.http_url}/v2/models/{model}/infer"
    return httpx.post(url, json=body(**parameters), timeout=CLIENT_TIMEOUT_S)


def pid_of(reply: httpx.Response) -> int:
    assert reply.status_code == 200, reply.text
    (pid,) = set(next(o for o in reply.json()["outputs"] if o["name"] == "PID")["data"])
    return int(pid)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_stuck_model_holds_only_its_own_instances_and_sigterm_still_exits(
    tmp_path: Path,
) -> None:
    shutil.copytree(TEST_MODELS / "stuck_python", tmp_path / "stuck")
    shutil.copytree(TEST_MODELS / "slow_python", tmp_path / "fast")
    server = start_server(tmp_path, "--request-timeout", "1", "--drain-grace", str(DRAIN_GRACE_S))
    try:
        # six calls that block 8 s (past the 1 s timeout) on the stuck model's one instance ...
        threads, results = in_threads([lambda: infer(server, "stuck", block=8)] * 6)
        for _ in range(5):  # ... while the other model keeps answering
            assert infer(server, "fast").status_code == 200
        for thread in threads:
            thread.join(CLIENT_TIMEOUT_S)
        assert [r.status_code for r in results] == [504] * 6
        assert all("request timeout of 1000 ms" in r.json()["error"] for r in results)

        # its one instance is held past the timeout: it reports not ready, and says why
        ready_url = f"{server.http_url}/v2/models/stuck/ready"
        wait_for(lambda: httpx.get(ready_url).status_code == 503, "stuck reports not ready")
        properties = httpx.get(f"{server.http_url}/v2/models/stuck").json()["properties"]
        assert properties["state"] == "UNAVAILABLE"
        assert "stuck in calls that outlived their request timeout" in properties["reason"]
        assert httpx.get(server.http_url + "/v2/health/ready").status_code == 503
        assert not ready_over_grpc(server.grpc_address, "stuck")
        assert ready_over_grpc(server.grpc_address, "fast")
        refused = infer(server, "stuck")
        assert refused.status_code == 503
        assert "stuck" in refused.json()["error"]
        assert infer(server, "fast").status_code == 200
        warnings = wait_for_lines(
            server, lambda ln: "WARNING" in ln and "model stuck version 1" in ln
        )
        assert "is not ready" in warnings[0]
        assert "has run" in warnings[0]

        # the stuck call returns: ready again
        wait_for(lambda: httpx.get(ready_url).status_code == 200, "stuck is ready again")
        assert httpx.get(server.http_url + "/v2/health/ready").status_code == 200
        wait_for_lines(server, lambda ln: "model stuck version 1 is ready again" in ln)

        # a call without a timeout hangs (60 s) in the model: SIGTERM exits after the grace
        hung, _ = in_threads(
            [lambda: _swallow(lambda: infer(server, "stuck", block=60, timeout=0))]
        )
        wait_for(lambda: inflight(server, "stuck") == 1, "the hung call is in the model")
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=DRAIN_GRACE_S + EXIT_MARGIN_S) == 0, server.lines
        wait_for_lines(server, lambda ln: ln == "rosettaserve stopped")
        hung[0].join(CLIENT_TIMEOUT_S)
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()


def _swallow(call: Any) -> Any:
    """The client of a call the server drops when it stops: whatever it got, or its error."""
    try:
        return call()
    except httpx.HTTPError as exc:
        return exc


def test_process_isolation_kills_the_worker_of_a_timed_out_call(tmp_path: Path) -> None:
    shutil.copytree(TEST_MODELS / "stuck_python", tmp_path / "isolated")
    with (tmp_path / "isolated" / "model.yaml").open("a") as yaml:
        yaml.write("isolation: process\ndefault_timeout_microseconds: 1000000\n")
    shutil.copytree(TEST_MODELS / "stuck_python", tmp_path / "batched")
    with (tmp_path / "batched" / "model.yaml").open("a") as yaml:
        yaml.write(
            "isolation: process\ndefault_timeout_microseconds: 1000000\n"
            "max_batch_size: 4\ndynamic_batching: {}\n"
        )
    shutil.copytree(TEST_MODELS / "concurrency_python", tmp_path / "concurrency")
    server = start_server(tmp_path)
    try:
        first = pid_of(infer(server, "isolated"))
        assert first != server.proc.pid  # it ran in a worker process

        # two calls for its one worker: one times out in it, the other waiting for it
        threads, results = in_threads([lambda: infer(server, "isolated", block=30)] * 2)
        for thread in threads:
            thread.join(CLIENT_TIMEOUT_S)
        assert [r.status_code for r in results] == [504, 504]
        errors = sorted(r.json()["error"] for r in results)
        assert all("request timeout of 1000 ms" in e for e in errors)
        assert errors[0].endswith("while it ran (its result is discarded)")
        assert errors[1].endswith("while queued")
        wait_for(lambda: gone(first), f"worker process {first} is gone")
        wait_for_lines(server, lambda ln: f"killed worker process {first}" in ln)

        second = pid_of(_first_success(lambda: infer(server, "isolated")))
        assert second not in (first, server.proc.pid)
        assert httpx.get(f"{server.http_url}/v2/models/isolated/ready").status_code == 200

        # a worker that dies in a call: a 500 saying so, and another worker in its place
        died = infer(server, "isolated", exit=3)
        assert died.status_code == 500
        assert "worker process exited during the call" in died.json()["error"]
        third = pid_of(_first_success(lambda: infer(server, "isolated")))
        assert third not in (first, second)

        # batched, nothing cancels the batch's call: it is stopped once past its deadline
        batched = pid_of(infer(server, "batched"))
        assert infer(server, "batched", block=30).status_code == 504
        wait_for(lambda: gone(batched), f"batched worker process {batched} is gone")
        stopped = f"killed worker process {batched} (its call outlived its request timeout)"
        wait_for_lines(server, lambda ln: stopped in ln)
        assert pid_of(_first_success(lambda: infer(server, "batched"))) != batched

        # instances: 2 -- two calls inside the model at once (each waits to see the other)
        threads, results = in_threads([lambda: _peak(server)] * 2)
        for thread in threads:
            thread.join(CLIENT_TIMEOUT_S)
        assert results == [2, 2]
    finally:
        code = server.stop()
    assert code == 0, "\n".join(server.lines)
    assert gone(third)  # its workers stop with the server


def _first_success(call: Any, attempts: int = 30) -> httpx.Response:
    """The first successful reply of ``call`` (a replacement worker may still be loading)."""
    for _ in range(attempts):
        reply: httpx.Response = call()
        if reply.is_success:
            return reply
    raise AssertionError(f"never answered: {reply.status_code} {reply.text}")


def _peak(server: ServerProcess) -> int:
    url = f"{server.http_url}/v2/models/concurrency/infer"
    reply = httpx.post(url, json=body(expect=2), timeout=CLIENT_TIMEOUT_S)
    assert reply.status_code == 200, reply.text
    return int(reply.json()["outputs"][0]["data"][0])


def test_sigterm_exits_even_when_a_call_blocks_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call known to be fast runs on the event loop's thread; if one then hangs, the loop
    never sees SIGTERM: the process still exits, once the drain grace and a margin are over."""
    monkeypatch.setenv("ROSETTASERVE_INLINE_US", "100000")  # calls under 100 ms run inline
    shutil.copytree(TEST_MODELS / "stuck_python", tmp_path / "stuck")
    server = start_server(tmp_path, "--drain-grace", str(DRAIN_GRACE_S))
    try:
        for _ in range(20):  # fast calls: the next ones run on the event loop's thread
            assert infer(server, "stuck").status_code == 200
        hung, _ = in_threads([lambda: _swallow(lambda: infer(server, "stuck", block=60))])
        wait_for(lambda: not _answers(server), "the event loop is blocked")
        server.proc.send_signal(signal.SIGTERM)
        limit = DRAIN_GRACE_S + exit_backstop.MARGIN_S + EXIT_MARGIN_S
        assert server.proc.wait(timeout=limit) == 0, server.lines
        wait_for_lines(server, lambda ln: "did not stop within the drain grace" in ln)
        hung[0].join(CLIENT_TIMEOUT_S)
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()


def _answers(server: ServerProcess) -> bool:
    try:
        return httpx.get(server.http_url + "/v2/health/live", timeout=0.5).is_success
    except httpx.TimeoutException:
        return False
