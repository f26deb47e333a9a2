"""The standard gRPC health service that orchestrators' gRPC probes call (Check) and gRPC
clients' health checking watches (Watch), with grpcio and the project's health messages."""

from __future__ import annotations

import shutil
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest

from rosettaserve.protocols.health.pb import health_pb2 as pb
from rosettaserve.protocols.oip.pb import grpc_service_pb2 as oip_pb
from tests.conftest import EXAMPLES
from tests.serverproc import ServerProcess, start_server

CHECK = "/grpc.health.v1.Health/Check"
Status = pb.HealthCheckResponse.ServingStatus


def check(address: str, service: str) -> int:
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(
            CHECK,
            request_serializer=pb.HealthCheckRequest.SerializeToString,
            response_deserializer=pb.HealthCheckResponse.FromString,
        )
        return int(call(pb.HealthCheckRequest(service=service), timeout=10).status)


@pytest.mark.parametrize("service", ["", "inference.GRPCInferenceService"])
def test_ready_server_is_serving(server: ServerProcess, service: str) -> None:
    assert check(server.grpc_address, service) == Status.SERVING


def test_unknown_service_is_not_found(server: ServerProcess) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        check(server.grpc_address, "no.such.Service")
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_server_with_a_failed_model_is_not_serving(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "model.yaml").write_text("runtime: nonsense\n")
    proc = start_server(tmp_path, wait_ready=False)
    try:
        assert check(proc.grpc_address, "") == Status.NOT_SERVING
    finally:
        assert proc.stop() == 0


# -- Watch ------------------------------------------------------------------------------------

WATCH = "/grpc.health.v1.Health/Watch"
EXIT_BOUND_S = 10.0  # a hang guard: the drain grace (60 s) must not wait for open Watches
GATED_MODEL = '''
import time
from pathlib import Path

from rosettaserve import Model


class Gated(Model):
    """Loads once the test creates the file ``open`` beside it (at most a minute)."""

    def load(self) -> None:
        gate = Path(__file__).with_name("open")
        for _ in range(600):
            if gate.exists():
                return
            time.sleep(0.1)
'''


def watch(channel: grpc.Channel, service: str) -> Any:
    """The call: iterate it for the statuses, ``cancel()`` it to leave."""
    call = channel.unary_stream(
        WATCH,
        request_serializer=pb.HealthCheckRequest.SerializeToString,
        response_deserializer=pb.HealthCheckResponse.FromString,
    )
    return call(pb.HealthCheckRequest(service=service), timeout=120)


def infer_half_plus_two(channel: grpc.Channel) -> bytes:
    request = oip_pb.ModelInferRequest(model_name="half_plus_two")
    request.inputs.add(name="x", datatype="FP32", shape=[3])
    request.raw_input_contents.append(np.array([1, 2, 3], "<f4").tobytes())
    infer = channel.unary_unary(
        "/inference.GRPCInferenceService/ModelInfer",
        request_serializer=oip_pb.ModelInferRequest.SerializeToString,
        response_deserializer=oip_pb.ModelInferResponse.FromString,
    )
    reply = infer(request, timeout=30)
    return bytes(reply.raw_output_contents[0])


@pytest.mark.parametrize("service", ["", "inference.GRPCInferenceService"])
def test_watch_sends_serving_at_once(server: ServerProcess, service: str) -> None:
    with grpc.insecure_channel(server.grpc_address) as channel:
        call = watch(channel, service)
        assert next(call).status == Status.SERVING
        call.cancel()


def test_watch_of_an_unknown_service_is_service_unknown_and_the_call_stays_open(
    server: ServerProcess,
) -> None:
    with grpc.insecure_channel(server.grpc_address) as channel:
        call = watch(channel, "no.such.Service")
        assert next(call).status == Status.SERVICE_UNKNOWN
        assert check(server.grpc_address, "") == Status.SERVING  # answered meanwhile
        assert call.is_active()  # not ended by the server
        call.cancel()
        assert call.code() == grpc.StatusCode.CANCELLED


def test_watches_beside_other_calls_change_none_of_their_answers(server: ServerProcess) -> None:
    """The neighbour: a client holding many Watch streams open on the connection a normal
    client uses; the normal client's calls answer exactly as alone."""
    with grpc.insecure_channel(server.grpc_address) as channel:
        alone = infer_half_plus_two(channel), check(server.grpc_address, "")
        calls = [watch(channel, "") for _ in range(100)]
        assert {next(c).status for c in calls} == {Status.SERVING}
        for _ in range(5):
            beside = infer_half_plus_two(channel), check(server.grpc_address, "")
            assert beside == alone
        for c in calls:
            c.cancel()


def test_watches_left_by_their_clients_free_their_streams(server: ServerProcess) -> None:
    """More Watches opened and left, one after the other on one connection, than it may hold
    streams at once (1024): each left stream was freed, or the last ones would wait for ever."""
    with grpc.insecure_channel(server.grpc_address) as channel:
        for _ in range(1100):
            call = watch(channel, "")
            assert next(call).status == Status.SERVING
            call.cancel()
        assert len(infer_half_plus_two(channel)) == 12


def test_watch_is_told_of_readiness_going_and_coming(tmp_path: Path) -> None:
    """SERVING; NOT_SERVING while a model loaded through model control loads, SERVING once it
    loaded; NOT_SERVING at SIGTERM; and the open Watch does not hold the shutdown back."""
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "half_plus_two", repo / "half_plus_two")
    gated = tmp_path / "gated"
    gated.mkdir()
    (gated / "model.py").write_text(GATED_MODEL)
    (gated / "model.yaml").write_text(
        "runtime: python\nclass: Gated\ninputs:\n  - {name: x, datatype: FP32, shape: [-1]}\n"
        "outputs:\n  - {name: y, datatype: FP32, shape: [-1]}\n"
    )
    proc = start_server(repo, "--enable-model-control")
    try:
        with grpc.insecure_channel(proc.grpc_address) as channel:
            call = watch(channel, "")
            assert next(call).status == Status.SERVING
            shutil.copytree(gated, repo / "gated")
            url = f"{proc.http_url}/v2/repository/models/gated/load"
            with ThreadPoolExecutor(1) as pool:
                loading = pool.submit(httpx.post, url, timeout=120)
                assert next(call).status == Status.NOT_SERVING
                (repo / "gated" / "open").touch()
                assert next(call).status == Status.SERVING
                assert loading.result().status_code == 200
            proc.proc.send_signal(signal.SIGTERM)
            assert next(call).status == Status.NOT_SERVING
            # the server exits with the Watch open (a hang guard: the drain grace is 60 s)
            assert proc.proc.wait(timeout=EXIT_BOUND_S) == 0, "\n".join(proc.lines)
            with pytest.raises(grpc.RpcError):  # the stream ended with the server
                next(call)
    finally:
        if proc.proc.poll() is None:
            proc.proc.kill()
            proc.proc.wait()
