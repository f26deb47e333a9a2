"""The option groups ``serve`` and ``scheduler`` share or that stand apart (TLS and API keys,
prefill/decode, HTTP limits), and the value types of the command line's options."""

from __future__ import annotations

import argparse
from pathlib import Path

from rosettaserve.core.generation_plane import DEFAULT_RESPONSES_STORE
from rosettaserve.core.suggest import one_of
from rosettaserve.pd.options import ROLES
from rosettaserve.security.keys import ENV_VAR
from rosettaserve.transport.defaults import (
    DEFAULT_BODY_MIN_RATE,
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_MAX_HEADER_SIZE,
    DEFAULT_MAX_REQUEST_LINE,
    DEFAULT_SEND_TIMEOUT,
)


def add_security_options(parser: argparse.ArgumentParser) -> None:
    """TLS and API keys for the process's own ports, and what it sends its PD peers."""
    own = parser.add_argument_group("TLS and API keys (see docs/security.md)")
    own.add_argument("--tls-cert", type=Path, metavar="FILE", help="serve TLS: certificate (PEM)")
    own.add_argument("--tls-key", type=Path, metavar="FILE", help="serve TLS: private key (PEM)")
    own.add_argument(
        "--tls-client-ca",
        type=Path,
        metavar="FILE",
        help="mutual TLS: clients must present a certificate this CA signed (PEM)",
    )
    own.add_argument(
        "--api-key",
        action="append",
        default=[],
        metavar="KEY",
        help="every request but the health probes needs Authorization: Bearer KEY or "
        f"x-api-key: KEY (repeatable; also --api-key-file and ${ENV_VAR})",
    )
    own.add_argument(
        "--api-key-file",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="API keys, one a line, # comments (repeatable; read again on SIGHUP)",
    )
    peers = parser.add_argument_group("prefill/decode peers over TLS")
    peers.add_argument(
        "--peer-ca",
        type=Path,
        metavar="FILE",
        help="verify the PD peers' certificates with this CA (else the system's CAs)",
    )
    peers.add_argument(
        "--peer-cert", type=Path, metavar="FILE", help="client certificate for PD peers (mTLS)"
    )
    peers.add_argument("--peer-key", type=Path, metavar="FILE", help="its private key")
    peers.add_argument(
        "--peer-api-key", default="", metavar="KEY", help="API key sent to the PD peers"
    )


def add_pd_options(serve: argparse.ArgumentParser) -> None:
    pd = serve.add_argument_group("prefill/decode disaggregation")
    pd.add_argument(
        "--role",
        type=one_of(ROLES),
        choices=ROLES,
        default="mixed",
        help="mixed: serve requests whole; prefill, decode: serve one half of the requests a "
        "`rosettaserve scheduler` splits",
    )
    pd.add_argument(
        "--kv-lease",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="prefill: free a KV cache no decode instance fetched after this long",
    )
    pd.add_argument(
        "--kv-lease-budget",
        type=positive,
        default=None,
        metavar="BYTES",
        help="prefill: the most bytes of KV caches held for decode instances together; a "
        "hand-over beyond it is refused with 503 (default: a quarter of the memory the "
        "process may use, its cgroup's limit or the machine's)",
    )
    pd.add_argument(
        "--peer-allow",
        nargs="+",
        action="extend",
        default=[],
        type=peer,
        metavar="PEER",
        help="prefill, decode: the only instances this one hands requests to or fetches KV "
        "caches from, HOST:PORT, HOST (any port) or http(s)://HOST:PORT (repeatable); a DNS "
        "name stands for every address it resolves to; any other d-target or pNodeAddr is "
        "refused with 403 (none given: every one is)",
    )
    pd.add_argument(
        "--max-kv-bytes",
        type=positive,
        default=1 << 30,
        metavar="BYTES",
        help="the largest KV cache a prefill instance sends or a decode instance accepts",
    )
    pd.add_argument(
        "--dresult-heartbeat",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="decode: send ka:heartbeat on /dresult after this long without a frame",
    )
    pd.add_argument(
        "--advertise-host",
        default="",
        metavar="HOST",
        help="the address other instances reach this one at (default: --host)",
    )


def add_llm_api_options(serve: argparse.ArgumentParser) -> None:
    """What the LLM API families keep between requests."""
    serve.add_argument(
        "--responses-store",
        type=non_negative,
        default=DEFAULT_RESPONSES_STORE,
        metavar="N",
        help="the Responses API keeps this many responses in memory (previous_response_id, GET "
        "and DELETE /v1/responses/{id}); the oldest goes first (0: none is kept)",
    )


def add_response_cache(serve: argparse.ArgumentParser) -> None:
    """Triton's response cache: the server's half of it (model.yaml's response_cache is the
    model's)."""
    serve.add_argument(
        "--cache-size",
        type=non_negative,
        default=0,
        metavar="BYTES",
        help="keep answers of models with response_cache: true in model.yaml, for requests "
        "with identical inputs, in at most BYTES (the least recently used go first; each "
        "worker keeps its own); 0: no response cache",
    )


def add_http_limits(serve: argparse.ArgumentParser) -> None:
    """What an HTTP client may hold of the server: bytes of a request head, and time (``serve``
    and ``scheduler`` alike; ``settings.http_limits_of`` reads them)."""
    limits = serve.add_argument_group("HTTP limits (see docs/security.md)")
    limits.add_argument(
        "--header-timeout",
        type=positive_float,
        default=DEFAULT_HEADER_TIMEOUT,
        metavar="SECONDS",
        help="a request head not whole this long after its first byte: 408 and the close",
    )
    limits.add_argument(
        "--body-timeout",
        type=positive_float,
        default=DEFAULT_BODY_TIMEOUT,
        metavar="SECONDS",
        help="a request body (HTTP/2: a request, or one message of a gRPC streaming call) with "
        "no byte for this long: 408 and the close (HTTP/2: the stream reset); one that keeps "
        "arriving too slowly: see --body-min-rate",
    )
    limits.add_argument(
        "--body-min-rate",
        type=positive,
        default=DEFAULT_BODY_MIN_RATE,
        metavar="BYTES",
        help="a request body has --body-timeout seconds, and one more for every BYTES of it "
        "received; slower (a body dripped): 408 and the close (HTTP/2: the stream reset)",
    )
    limits.add_argument(
        "--max-request-line",
        type=positive,
        default=DEFAULT_MAX_REQUEST_LINE,
        metavar="BYTES",
        help="longest request target (URL); longer: 414 and the close",
    )
    limits.add_argument(
        "--max-header-size",
        type=positive,
        default=DEFAULT_MAX_HEADER_SIZE,
        metavar="BYTES",
        help="largest header fields of a request, together; larger: 431 and the close",
    )
    limits.add_argument(
        "--send-timeout",
        type=positive_float,
        default=DEFAULT_SEND_TIMEOUT,
        metavar="SECONDS",
        help="an answer the client takes nothing of for this long (it does not read, or its "
        "HTTP/2 window stays shut): the stream is reset, or the connection closed",
    )


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def peer(text: str) -> str:
    from rosettaserve.pd.peers import parse_peer

    try:
        parse_peer(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value
