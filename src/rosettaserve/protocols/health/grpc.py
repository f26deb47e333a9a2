"""grpc.health.v1.Health/Check: SERVING when the server is ready (Watch is not served)."""

from __future__ import annotations

from typing import Any

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import NotFound
from rosettaserve.protocols.health.pb import health_pb2 as pb

SERVICE = "grpc.health.v1.Health"
Status = pb.HealthCheckResponse.ServingStatus


class HealthServicer:
    def __init__(self, dp: DataPlane, services: list[str]) -> None:
        self.dp = dp
        self.services = {"", *services}  # "" asks about the server as a whole

    async def Check(self, request: Any, context: Any) -> Any:
        if request.service not in self.services:
            raise NotFound(f"unknown service '{request.service}'")
        status = Status.SERVING if self.dp.ready() else Status.NOT_SERVING
        return pb.HealthCheckResponse(status=status)


RPCS: dict[str, tuple[Any, Any, bool]] = {
    "Check": (pb.HealthCheckRequest, pb.HealthCheckResponse, False),
}
