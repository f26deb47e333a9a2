"""The ONE status table: each error kind's HTTP status and gRPC code.

gRPC codes are kept as their integer values so that core/ needs no grpc import;
transports turn them into ``grpc.StatusCode`` members.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True, slots=True)
class StatusPair:
    http: int
    grpc: int  # google.rpc.Code value
    grpc_name: str


class ErrorKind(Enum):
    INVALID_ARGUMENT = StatusPair(400, 3, "INVALID_ARGUMENT")
    NOT_FOUND = StatusPair(404, 5, "NOT_FOUND")
    METHOD_NOT_ALLOWED = StatusPair(405, 12, "UNIMPLEMENTED")
    ALREADY_EXISTS = StatusPair(409, 6, "ALREADY_EXISTS")
    PAYLOAD_TOO_LARGE = StatusPair(413, 8, "RESOURCE_EXHAUSTED")
    OVERLOADED = StatusPair(429, 8, "RESOURCE_EXHAUSTED")
    CANCELLED = StatusPair(499, 1, "CANCELLED")
    INTERNAL = StatusPair(500, 13, "INTERNAL")
    UNIMPLEMENTED = StatusPair(501, 12, "UNIMPLEMENTED")
    UNAVAILABLE = StatusPair(503, 14, "UNAVAILABLE")
    DEADLINE_EXCEEDED = StatusPair(504, 4, "DEADLINE_EXCEEDED")
    FORBIDDEN = StatusPair(403, 7, "PERMISSION_DENIED")
    UNAUTHENTICATED = StatusPair(401, 16, "UNAUTHENTICATED")

    @property
    def http(self) -> int:
        return self.value.http

    @property
    def grpc(self) -> int:
        return self.value.grpc


BY_HTTP: dict[int, ErrorKind] = {}
for _kind in ErrorKind:
    BY_HTTP.setdefault(_kind.http, _kind)
