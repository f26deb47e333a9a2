"""The standard gRPC health service that orchestrators' gRPC probes call."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from rosettaserve.protocols.health.pb import health_pb2 as pb
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
