"""API keys: loaded once at start, checked in one place for HTTP and gRPC.

A request carries its key as ``Authorization: Bearer KEY`` or ``x-api-key: KEY`` (the gRPC
metadata of the same names). The key given is compared with every key configured (all of them,
match or not) by ``hmac.compare_digest``, whose time depends on the length of what the client
sent only: it tells nothing about the keys, their number aside, not even their length. Keys
never appear in a log or in an error message.

Open without a key, as orchestrators' probes carry none: the liveness and readiness probes of
each protocol (``OPEN_HTTP``, ``OPEN_GRPC``; over HTTP, GET and HEAD alike). Everything else
needs a key.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from rosettaserve.core.errors import Unauthenticated

ENV_VAR = "ROSETTASERVE_API_KEY"

# (method, route pattern): the routes answered without a key
OPEN_HTTP = frozenset(
    {
        ("GET", "/v2/health/live"),
        ("GET", "/v2/health/ready"),
        ("GET", "/grps/v1/health/live"),
        ("GET", "/grps/v1/health/ready"),
        ("GET", "/health"),  # TGI and vLLM
        ("GET", "/ping"),  # TorchServe
    }
)
# gRPC method paths answered without a key
OPEN_GRPC = frozenset(
    {
        "/inference.GRPCInferenceService/ServerLive",
        "/inference.GRPCInferenceService/ServerReady",
        "/grps.protos.v1.GrpsService/CheckLiveness",
        "/grps.protos.v1.GrpsService/CheckReadiness",
        "/grpc.health.v1.Health/Check",
    }
)

_BEARER = "bearer "
REFUSAL = "a valid API key is required (Authorization: Bearer KEY or x-api-key: KEY)"


class KeySourceError(ValueError):
    """A key source that cannot be used; the message names the file, never a key."""


def _raw(key: str) -> bytes:
    # utf-8 with surrogatepass: any str encodes, and a non-ASCII character never equals ASCII
    return key.encode("utf-8", "surrogatepass")


def _valid(key: str) -> bool:
    return bool(key) and all(33 <= ord(c) < 127 for c in key)


def read_key_file(path: Path) -> list[str]:
    """One key a line; blank lines and ``#`` comments skipped."""
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise KeySourceError(f"cannot read the API key file {path}: {reason}") from None
    keys = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not _valid(line):
            raise KeySourceError(f"{path} line {number}: a key is printable ASCII without spaces")
        keys.append(line)
    if not keys:
        raise KeySourceError(f"the API key file {path} holds no key")
    return keys


def gather_keys(
    given: Sequence[str], files: Sequence[Path], environ: Mapping[str, str] = os.environ
) -> tuple[str, ...]:
    """Keys from ``--api-key``, ``--api-key-file`` and the environment, all valid together."""
    keys = list(given)
    for path in files:
        keys += read_key_file(path)
    from_env = environ.get(ENV_VAR, "").strip()
    if from_env:
        keys.append(from_env)
    for index, key in enumerate(keys):
        if not _valid(key):
            raise KeySourceError(
                f"API key #{index + 1} is empty or not printable ASCII without spaces"
            )
    return tuple(dict.fromkeys(keys))


class Guard:
    """The configured keys and the check every request goes through."""

    __slots__ = ("_keys",)

    def __init__(self, keys: Iterable[str]) -> None:
        self._keys = tuple(_raw(k) for k in keys)
        if not self._keys:
            raise ValueError("a Guard needs at least one key")

    def __repr__(self) -> str:
        return f"Guard({len(self._keys)} keys)"

    def replace(self, keys: Iterable[str]) -> None:
        """The keys from now on (SIGHUP: the key files read again); none: the old ones stay."""
        fresh = tuple(_raw(k) for k in keys)
        if fresh:
            self._keys = fresh

    @staticmethod
    def refusal() -> Unauthenticated:
        """The error a request without a valid key gets (in its protocol's own shape)."""
        return Unauthenticated(REFUSAL, headers={"www-authenticate": "Bearer"})

    def valid(self, key: str) -> bool:
        given = _raw(key)
        ok = False
        for known in self._keys:  # every key, whether one matched already or not
            ok |= hmac.compare_digest(known, given)  # its time: len(given)'s only
        return ok

    def admits_http(self, method: str, pattern: str, headers: Mapping[str, str]) -> bool:
        """``method`` and ``pattern``: the route that serves the request (a HEAD request is
        served by the GET route, so it is open where GET is). ``headers``: lower-case names.
        Open routes pass without a key."""
        key = presented(headers.get("authorization"), None)
        if key is None:
            key = presented(None, headers.get("x-api-key"))
        if key is not None and self.valid(key):
            return True
        return (method, pattern) in OPEN_HTTP

    def admits_grpc(self, path: str, metadata: Iterable[tuple[str, str]]) -> bool:
        if path in OPEN_GRPC:
            return True
        authorization = api_key = None
        for name, value in metadata:
            if name == "authorization":
                authorization = value
            elif name == "x-api-key":
                api_key = value
        key = presented(authorization, api_key)
        return key is not None and self.valid(key)


def presented(authorization: str | None, api_key: str | None) -> str | None:
    """The key a request carries: ``Authorization: Bearer KEY`` first, then ``x-api-key``."""
    if authorization is not None and (
        authorization.startswith("Bearer ") or authorization[:7].lower() == _BEARER
    ):
        return authorization[7:].strip()
    if api_key is not None:
        return api_key.strip()
    return None
