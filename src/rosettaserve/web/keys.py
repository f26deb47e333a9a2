"""What the app and the gRPC server ask of an API-key check, declared here so that neither
depends on whoever checks keys (``rosettaserve.security.keys.Guard`` is the one the server
sets)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from rosettaserve.core.errors import ServingError
from rosettaserve.core.share import Share


class KeyCheck(Protocol):
    def admits_http(self, method: str, pattern: str, headers: Mapping[str, str]) -> Share | None:
        """The request's tenant in the queues (core/share.py), None: not admitted. ``method``
        and ``pattern``: the route that serves the request; ``headers``: lower-case names."""
        ...

    def admits_grpc(self, path: str, metadata: Iterable[tuple[str, str]]) -> Share | None: ...

    def refusal(self) -> ServingError:
        """The error a request that is not admitted gets (in its protocol's own shape)."""
        ...
