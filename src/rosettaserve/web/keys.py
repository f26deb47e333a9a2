"""What the app and the gRPC server ask of an API-key check, declared here so that neither
depends on whoever checks keys (``rosettaserve.security.keys.Guard`` is the one the server
sets)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from rosettaserve.core.errors import ServingError


class KeyCheck(Protocol):
    def admits_http(self, method: str, pattern: str, headers: Mapping[str, str]) -> bool:
        """``method`` and ``pattern``: the route that serves the request; ``headers``:
        lower-case names."""
        ...

    def admits_grpc(self, path: str, metadata: Iterable[tuple[str, str]]) -> bool: ...

    def refusal(self) -> ServingError:
        """The error a request that is not admitted gets (in its protocol's own shape)."""
        ...
