"""API keys: loaded once at start, checked in one place for HTTP and gRPC.

A request carries its key as ``Authorization: Bearer KEY`` or ``x-api-key: KEY`` (the gRPC
metadata of the same names). The key given is compared with every key configured (all of them,
match or not) by ``hmac.compare_digest``, whose time depends on the length of what the client
sent only: it tells nothing about the keys, their number aside, not even their length. Keys
never appear in a log or in an error message.

A key file line may give its key a weight: ``KEY weight=4``. Each key is a tenant of the queues
(core/share.py): where requests wait (the dynamic batcher, the LLM engine's admission), keys
are served in proportion to their weights, 1 unless given, instead of first come first served.

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
from rosettaserve.core.share import DEFAULT, Share

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
_WEIGHT = "weight="
MAX_WEIGHT = 1e6  # a weight's range: (0, MAX_WEIGHT]
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
    return list(read_weighted_keys(path))


def read_weighted_keys(path: Path) -> dict[str, float]:
    """Each key of the file with its weight (``KEY weight=W``; 1 when not given)."""
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise KeySourceError(f"cannot read the API key file {path}: {reason}") from None
    keys: dict[str, float] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, *rest = line.split()
        if not _valid(key):
            raise KeySourceError(f"{path} line {number}: a key is printable ASCII without spaces")
        keys[key] = _weight(rest, f"{path} line {number}")
    if not keys:
        raise KeySourceError(f"the API key file {path} holds no key")
    return keys


def _weight(fields: list[str], where: str) -> float:
    if not fields:
        return 1.0
    text = fields[0][len(_WEIGHT) :] if fields[0].startswith(_WEIGHT) else ""
    try:
        weight = float(text) if len(fields) == 1 and text else -1.0
    except ValueError:
        weight = -1.0
    if not 0 < weight <= MAX_WEIGHT:  # (NaN too)
        raise KeySourceError(
            f"{where}: after the key, only weight=W (a number in (0, {MAX_WEIGHT:g}]) may follow"
        )
    return weight


def key_weights(files: Sequence[Path]) -> dict[str, float]:
    """The keys of ``files`` whose weight is not 1, with it (a key in two files: the last)."""
    weights: dict[str, float] = {}
    for path in files:
        weights.update(read_weighted_keys(path))
    return {key: weight for key, weight in weights.items() if weight != 1.0}


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
    """The configured keys and the check every request goes through. A request admitted is
    handed its key's tenant (core/share.py): named by the key's place among the keys (never by
    the key), weighted by ``weights`` (1 for a key not in it)."""

    __slots__ = ("_keys", "_tenants")

    def __init__(self, keys: Iterable[str], weights: Mapping[str, float] | None = None) -> None:
        self._keys: tuple[bytes, ...] = ()
        self._tenants: tuple[Share, ...] = ()
        self.replace(keys, weights)
        if not self._keys:
            raise ValueError("a Guard needs at least one key")

    def __repr__(self) -> str:
        return f"Guard({len(self._keys)} keys)"

    def replace(self, keys: Iterable[str], weights: Mapping[str, float] | None = None) -> None:
        """The keys from now on (SIGHUP: the key files read again); none: the old ones stay."""
        keys = tuple(keys)
        if keys:
            weights = weights or {}
            self._keys = tuple(_raw(k) for k in keys)
            self._tenants = tuple(
                Share(f"key#{n}", weights.get(k, 1.0), 0) for n, k in enumerate(keys, 1)
            )

    @staticmethod
    def refusal() -> Unauthenticated:
        """The error a request without a valid key gets (in its protocol's own shape)."""
        return Unauthenticated(REFUSAL, headers={"www-authenticate": "Bearer"})

    def valid(self, key: str) -> bool:
        return self.tenant(key) is not None

    def tenant(self, key: str) -> Share | None:
        """The tenant of ``key``; None: not a key."""
        given = _raw(key)
        found = 0  # the matching key's place from 1 (0: none), without a branch on a match
        for place, known in enumerate(self._keys, 1):  # every key, whether one matched or not
            found = max(found, place * hmac.compare_digest(known, given))  # len(given)'s time
        return self._tenants[found - 1] if found else None

    def admits_http(self, method: str, pattern: str, headers: Mapping[str, str]) -> Share | None:
        """The request's tenant, None: refused. ``method`` and ``pattern``: the route that
        serves the request (a HEAD request is served by the GET route, so it is open where GET
        is). ``headers``: lower-case names. Open routes pass without a key (tenant: DEFAULT)."""
        key = presented(headers.get("authorization"), None)
        if key is None:
            key = presented(None, headers.get("x-api-key"))
        tenant = None if key is None else self.tenant(key)
        if tenant is None and (method, pattern) in OPEN_HTTP:
            return DEFAULT
        return tenant

    def admits_grpc(self, path: str, metadata: Iterable[tuple[str, str]]) -> Share | None:
        if path in OPEN_GRPC:
            return DEFAULT
        authorization = api_key = None
        for name, value in metadata:
            if name == "authorization":
                authorization = value
            elif name == "x-api-key":
                api_key = value
        key = presented(authorization, api_key)
        return None if key is None else self.tenant(key)


def presented(authorization: str | None, api_key: str | None) -> str | None:
    """The key a request carries: ``Authorization: Bearer KEY`` first, then ``x-api-key``."""
    if authorization is not None and (
        authorization.startswith("Bearer ") or authorization[:7].lower() == _BEARER
    ):
        return authorization[7:].strip()
    if api_key is not None:
        return api_key.strip()
    return None
