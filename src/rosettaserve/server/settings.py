"""Server configuration: one typed object, built once at start and passed down."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rosettaserve.core.generation_plane import DEFAULT_RESPONSES_STORE
from rosettaserve.pd.options import PdOptions
from rosettaserve.repository.residency import Demand
from rosettaserve.security.tls import TlsFiles
from rosettaserve.transport.body_pace import BodyPace
from rosettaserve.transport.defaults import (
    DEFAULT_BODY_MIN_RATE,
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_MAX_HEADER_SIZE,
    DEFAULT_MAX_REQUEST_LINE,
    DEFAULT_SEND_TIMEOUT,
)
from rosettaserve.transport.h1_head import H1Limits

DEFAULT_MAX_REQUEST_SIZE = 256 * 1024 * 1024
DEFAULT_GRPC_MAX_MESSAGE_SIZE = 512 * 1024 * 1024  # a 256 MiB tensor and then some


@dataclass(frozen=True)
class SecurityOptions:
    """TLS and API keys (rosettaserve.security): this process's own ports, and its peers."""

    tls: TlsFiles | None = None  # None: clear text
    api_keys: tuple[str, ...] = field(default=(), repr=False)  # empty: no key asked
    api_key_files: tuple[Path, ...] = ()  # read again on SIGHUP
    static_keys: tuple[str, ...] = field(default=(), repr=False)  # --api-key and the environment
    # the key files' weights other than 1 (fair queueing between keys: core/share.py)
    api_key_weights: Mapping[str, float] = field(default_factory=dict, repr=False)
    peer_ca: Path | None = None  # verify peers' certificates with this CA (else the system's)
    peer_cert: Path | None = None  # presented to peers that require mutual TLS
    peer_key: Path | None = None
    peer_api_key: str = field(default="", repr=False)  # sent to peers that require a key

    @property
    def peers_secure(self) -> bool:
        """Instances reach each other over HTTPS when they serve HTTPS or have a peer CA."""
        return self.tls is not None or self.peer_ca is not None


@dataclass(frozen=True)
class Settings:
    repository: Path
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    grpc_max_message_size: int = DEFAULT_GRPC_MAX_MESSAGE_SIZE
    enable_model_control: bool = False
    allow_client_shm: bool = False  # clients may register system shared-memory regions
    max_request_size: int = DEFAULT_MAX_REQUEST_SIZE
    poll_interval: float = 0.0  # seconds; 0 = off
    strict_readiness: bool = True
    grps_default_model: str = ""  # grps requests that name no model: `name` or `name-version`
    trust_request_chat_template: bool = False  # render a chat request's own template (vLLM's)
    responses_store: int = DEFAULT_RESPONSES_STORE  # Responses API answers kept (oldest out)
    log_level: str = "info"
    log_format: str = "text"  # text | json: every line of the server (observability.logging_setup)
    access_log: bool = True  # one line per request (logger rosettaserve.access, at INFO)
    otel_exporter: str = "none"  # none | console | otlp: OpenTelemetry spans ([tracing] extra)
    cors_origins: tuple[str, ...] = ()  # origins a browser page may call from (*: any); (): off
    workers: int = 1  # processes serving the same ports (SO_REUSEPORT), each with its own models
    max_queue_size: int = 0  # requests waiting per model version beyond which 429; 0: no limit
    request_timeout_us: int = 0  # default timeout covering queue and execution; 0: none
    cache_size: int = 0  # bytes of the response cache (model.yaml response_cache); 0: none
    header_timeout: float = DEFAULT_HEADER_TIMEOUT  # HTTP/1.1: a head slower than this: 408
    body_timeout: float = DEFAULT_BODY_TIMEOUT  # a body silent this long: 408 / the stream reset
    body_min_rate: int = DEFAULT_BODY_MIN_RATE  # past body_timeout, a slower body: the same
    max_request_line: int = DEFAULT_MAX_REQUEST_LINE  # HTTP/1.1: a longer target: 414
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE  # HTTP/1.1: larger header fields: 431
    send_timeout: float = DEFAULT_SEND_TIMEOUT  # an answer the client takes nothing of: dropped
    drain_grace_s: float = 60.0  # on SIGTERM: the longest requests in flight are waited for
    stall_timeout_s: float = 60.0  # no progress this long while work waits: not ready (0: off)
    demand: Demand = field(default_factory=Demand)  # --load, --memory-budget, --load-timeout
    metrics_port: int | None = None  # None: /metrics on the HTTP port
    management_port: int | None = None  # None: TorchServe's management API on the HTTP port
    reuse_port: bool = False  # set by the supervisor for its workers
    role: str = "mixed"  # mixed | prefill | decode (prefill/decode disaggregation)
    pd: PdOptions = field(default_factory=PdOptions)
    security: SecurityOptions = field(default_factory=SecurityOptions)


def http_limits(settings: Settings) -> H1Limits:
    """What the HTTP/1.1 server holds of a request head, and how long it waits."""
    return H1Limits(
        header_timeout=settings.header_timeout,
        body_timeout=settings.body_timeout,
        body_min_rate=settings.body_min_rate,
        max_request_line=settings.max_request_line,
        max_header_size=settings.max_header_size,
        send_timeout=settings.send_timeout,
    )


def body_pace(settings: Settings) -> BodyPace:
    """How long a request body may take to arrive (HTTP/2 and gRPC; HTTP/1.1: ``http_limits``)."""
    return BodyPace(settings.body_timeout, settings.body_min_rate)
