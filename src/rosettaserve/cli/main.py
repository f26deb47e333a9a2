"""`rosettaserve serve|...`: options to Settings, nothing more."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rosettaserve import __version__
from rosettaserve.cli import help as cli_help
from rosettaserve.cli.logs import add_log_format, add_log_options
from rosettaserve.core.suggest import one_of, parse_args
from rosettaserve.observability import logging_setup
from rosettaserve.observability.tracing import EXPORTERS
from rosettaserve.security.keys import ENV_VAR, KeySourceError, gather_keys
from rosettaserve.security.tls import TlsError, TlsFiles
from rosettaserve.server.settings import (
    DEFAULT_GRPC_MAX_MESSAGE_SIZE,
    DEFAULT_MAX_REQUEST_SIZE,
    ROLES,
    PdOptions,
    SecurityOptions,
    Settings,
)
from rosettaserve.transport.defaults import (
    DEFAULT_BODY_MIN_RATE,
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_MAX_HEADER_SIZE,
    DEFAULT_MAX_REQUEST_LINE,
    DEFAULT_SEND_TIMEOUT,
)

LOG_LEVELS = ("debug", "info", "warning", "error")
POLICIES = ("load", "round-robin")  # how the scheduler picks an instance


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rosettaserve",
        description=cli_help.DESCRIPTION,
        epilog=cli_help.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rosettaserve {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser(
        "serve",
        help="serve a model repository",
        description=cli_help.SERVE_DESCRIPTION,
        epilog=cli_help.SERVE_EPILOG,
        formatter_class=cli_help.HelpFormatter,
    )
    serve.add_argument("repository", type=Path, metavar="REPO", help="model repository folder")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 for all)")
    serve.add_argument(
        "--http-port",
        type=int,
        default=8000,
        help="HTTP port for every REST protocol (0 = any free)",
    )
    serve.add_argument(
        "--grpc-port",
        type=int,
        default=8001,
        help="gRPC port for every gRPC service (0 = any free)",
    )
    serve.add_argument(
        "--grpc-max-message-size",
        type=int,
        default=DEFAULT_GRPC_MAX_MESSAGE_SIZE,
        metavar="BYTES",
        help="largest gRPC message received or sent",
    )
    serve.add_argument(
        "--enable-model-control",
        action="store_true",
        help="allow the model repository extension to load and unload models on request "
        "(only models inside REPO)",
    )
    serve.add_argument(
        "--max-request-size",
        type=int,
        default=DEFAULT_MAX_REQUEST_SIZE,
        metavar="BYTES",
        help="largest request body accepted; larger bodies get 413",
    )
    serve.add_argument(
        "--poll-interval",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="rescan the repository this often for added/removed/edited models and versions "
        "(0 = off)",
    )
    serve.add_argument(
        "--no-strict-readiness",
        dest="strict_readiness",
        action="store_false",
        help="report ready once the server is up, even if some model failed to load",
    )
    serve.add_argument(
        "--grps-default-model",
        default="",
        metavar="NAME[-VERSION]",
        help="the model a grps request runs when it names none (in its payload or ?model=)",
    )
    serve.add_argument(
        "--trust-request-chat-template",
        action="store_true",
        help="render a chat request's own chat_template (in Jinja's sandbox; refused with 400 "
        "unless this is set, as vLLM does): only for clients you would let run code",
    )
    add_scaling_options(serve)
    add_http_limits(serve)
    serve.add_argument(
        "--log-level",
        default="info",
        type=one_of(LOG_LEVELS),
        choices=LOG_LEVELS,
        help="log verbosity (logs go to stderr)",
    )
    add_log_options(serve)
    serve.add_argument(
        "--otel-exporter",
        default="none",
        type=one_of(EXPORTERS),
        choices=EXPORTERS,
        help="OpenTelemetry spans, one per request and per model execution, W3C traceparent "
        "honoured: console (JSON lines on stderr) or otlp (OTLP/HTTP to "
        "OTEL_EXPORTER_OTLP_ENDPOINT); needs the [tracing] extra (none: off, no cost)",
    )
    add_pd_options(serve)
    add_security_options(serve)
    add_scheduler_command(commands)
    return parser


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


def security_options(args: argparse.Namespace) -> SecurityOptions:
    """The security flags checked for what goes together; ValueError says what is wrong."""
    if (args.tls_cert is None) != (args.tls_key is None):
        raise TlsError("--tls-cert and --tls-key go together")
    if args.tls_client_ca is not None and args.tls_cert is None:
        raise TlsError("--tls-client-ca needs --tls-cert and --tls-key")
    if (args.peer_cert is None) != (args.peer_key is None):
        raise TlsError("--peer-cert and --peer-key go together")
    tls = None
    if args.tls_cert is not None:
        tls = TlsFiles(args.tls_cert, args.tls_key, args.tls_client_ca)
    static = gather_keys(args.api_key, [])
    return SecurityOptions(
        tls=tls,
        api_keys=gather_keys(static, args.api_key_file, {}),
        api_key_files=tuple(args.api_key_file),
        static_keys=static,
        peer_ca=args.peer_ca,
        peer_cert=args.peer_cert,
        peer_key=args.peer_key,
        peer_api_key=args.peer_api_key,
    )


def checked_security(args: argparse.Namespace, prog: str) -> SecurityOptions | None:
    """The security options, every file loaded once; None (and why, on stderr): do not start."""
    from rosettaserve.server.security_setup import check

    try:
        options = security_options(args)
        check(options)
    except (TlsError, KeySourceError) as exc:
        print(f"{prog}: cannot start: {exc}", file=sys.stderr)
        return None
    return options


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
        type=_positive,
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
        type=_peer,
        metavar="PEER",
        help="prefill, decode: the only instances this one hands requests to or fetches KV "
        "caches from, HOST:PORT, HOST (any port) or http(s)://HOST:PORT (repeatable); a DNS "
        "name stands for every address it resolves to; any other d-target or pNodeAddr is "
        "refused with 403 (none given: every one is)",
    )
    pd.add_argument(
        "--max-kv-bytes",
        type=_positive,
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


def add_scheduler_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sched = commands.add_parser(
        "scheduler",
        help="split LLM requests between prefill and decode instances",
        description="Accept the five LLM API families and serve each request with a prefill "
        "instance and a decode instance (rosettaserve serve REPO --role prefill|decode).",
        epilog=cli_help.SCHEDULER_EPILOG,
        formatter_class=cli_help.HelpFormatter,
    )
    for role in ("prefill", "decode"):
        sched.add_argument(
            f"--{role}",
            nargs="+",
            action="extend",
            required=True,
            metavar="URL",
            help=f"{role} instances, http://HOST:PORT or https://HOST:PORT (repeatable); a HOST "
            "that is a DNS name (a headless Service) stands for every address it resolves to",
        )
    sched.add_argument("--host", default="127.0.0.1", help="address to bind")
    sched.add_argument("--http-port", type=int, default=8000, help="HTTP port (0 = any free)")
    sched.add_argument(
        "--policy",
        type=one_of(POLICIES),
        choices=POLICIES,
        default="load",
        help="how instances are chosen: the least loaded, or each in turn",
    )
    sched.add_argument(
        "--max-retry", type=int, default=5, help="recomputes of one request before it fails"
    )
    sched.add_argument(
        "--token-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="the longest a decode instance may stay silent on a request",
    )
    sched.add_argument(
        "--discovery-interval",
        type=_positive_float,
        default=10.0,
        metavar="SECONDS",
        help="look instance URLs whose host is a DNS name up again this often (instances "
        "come and go with its addresses)",
    )
    sched.add_argument("--log-level", default="info", type=one_of(LOG_LEVELS), choices=LOG_LEVELS)
    add_log_format(sched)
    add_http_limits(sched)
    add_security_options(sched)


def add_http_limits(serve: argparse.ArgumentParser) -> None:
    """What an HTTP client may hold of the server: bytes of a request head, and time (``serve``
    and ``scheduler`` alike; ``http_limit_values`` reads them)."""
    limits = serve.add_argument_group("HTTP limits (see docs/security.md)")
    limits.add_argument(
        "--header-timeout",
        type=_positive_float,
        default=DEFAULT_HEADER_TIMEOUT,
        metavar="SECONDS",
        help="a request head not whole this long after its first byte: 408 and the close",
    )
    limits.add_argument(
        "--body-timeout",
        type=_positive_float,
        default=DEFAULT_BODY_TIMEOUT,
        metavar="SECONDS",
        help="a request body (HTTP/2: a request, or one message of a gRPC streaming call) with "
        "no byte for this long: 408 and the close (HTTP/2: the stream reset); one that keeps "
        "arriving too slowly: see --body-min-rate",
    )
    limits.add_argument(
        "--body-min-rate",
        type=_positive,
        default=DEFAULT_BODY_MIN_RATE,
        metavar="BYTES",
        help="a request body has --body-timeout seconds, and one more for every BYTES of it "
        "received; slower (a body dripped): 408 and the close (HTTP/2: the stream reset)",
    )
    limits.add_argument(
        "--max-request-line",
        type=_positive,
        default=DEFAULT_MAX_REQUEST_LINE,
        metavar="BYTES",
        help="longest request target (URL); longer: 414 and the close",
    )
    limits.add_argument(
        "--max-header-size",
        type=_positive,
        default=DEFAULT_MAX_HEADER_SIZE,
        metavar="BYTES",
        help="largest header fields of a request, together; larger: 431 and the close",
    )
    limits.add_argument(
        "--send-timeout",
        type=_positive_float,
        default=DEFAULT_SEND_TIMEOUT,
        metavar="SECONDS",
        help="an answer the client takes nothing of for this long (it does not read, or its "
        "HTTP/2 window stays shut): the stream is reset, or the connection closed",
    )


def http_limits_of(args: argparse.Namespace) -> dict[str, Any]:
    """``add_http_limits``'s values by their names in ``Settings`` and ``H1Limits``."""
    return {
        "header_timeout": args.header_timeout,
        "body_timeout": args.body_timeout,
        "body_min_rate": args.body_min_rate,
        "max_request_line": args.max_request_line,
        "max_header_size": args.max_header_size,
        "send_timeout": args.send_timeout,
    }


def add_scaling_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--workers",
        type=_positive,
        default=1,
        metavar="N",
        help="serve with N processes sharing the ports (SO_REUSEPORT); each loads every model",
    )
    serve.add_argument(
        "--max-queue-size",
        type=_non_negative,
        default=0,
        metavar="N",
        help="per model version: requests waiting beyond N are refused at once with 429 / "
        "RESOURCE_EXHAUSTED (0 = no limit; model.yaml max_queue_size wins); for an LLM, the "
        "requests waiting are those beyond its engine's max_num_seqs",
    )
    serve.add_argument(
        "--request-timeout",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="default timeout covering queue and execution: 504 / DEADLINE_EXCEEDED and the "
        "work is dropped (0 = none; model.yaml default_timeout_microseconds and a request's "
        "own timeout win); an LLM request's covers its whole generation (a stream then ends "
        "with its API's error chunk)",
    )
    serve.add_argument(
        "--drain-grace",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="on SIGTERM: the longest requests in flight are waited for; the server then exits "
        "even if a model call is stuck",
    )
    serve.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Prometheus /metrics on this port instead of the HTTP port (0 = any free)",
    )


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _peer(text: str) -> str:
    from rosettaserve.pd.peers import parse_peer

    try:
        parse_peer(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    args = parse_args(build_parser(), argv)  # a mistyped option or value: the closest named
    if args.command == "scheduler":
        return run_scheduler(args)
    if args.role != "mixed" and args.workers > 1:
        print("rosettaserve: --role prefill/decode serves with one process", file=sys.stderr)
        return 2
    if not args.repository.is_dir():
        print(f"rosettaserve: repository {args.repository} is not a folder", file=sys.stderr)
        return 2
    security = checked_security(args, "rosettaserve")
    if security is None:
        return 1
    settings = Settings(
        repository=args.repository,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        grpc_max_message_size=args.grpc_max_message_size,
        enable_model_control=args.enable_model_control,
        max_request_size=args.max_request_size,
        poll_interval=args.poll_interval,
        strict_readiness=args.strict_readiness,
        grps_default_model=args.grps_default_model,
        trust_request_chat_template=args.trust_request_chat_template,
        log_level=args.log_level,
        log_format=args.log_format,
        access_log=args.access_log,
        otel_exporter=args.otel_exporter,
        cors_origins=tuple(args.cors_origin),
        workers=args.workers,
        max_queue_size=args.max_queue_size,
        request_timeout_us=max(0, round(args.request_timeout * 1e6)),
        drain_grace_s=max(0.0, args.drain_grace),
        metrics_port=args.metrics_port,
        role=args.role,
        pd=PdOptions(
            kv_lease_s=args.kv_lease,
            kv_lease_budget=args.kv_lease_budget or 0,  # 0: from the memory
            max_kv_bytes=args.max_kv_bytes,
            heartbeat_s=args.dresult_heartbeat,
            advertise_host=args.advertise_host,
            peer_allow=tuple(args.peer_allow),
        ),
        security=security,
        **http_limits_of(args),
    )
    logging_setup.configure(args.log_level, args.log_format)
    return run(settings)


def run(settings: Settings) -> int:
    from rosettaserve.server import gc_tuning, malloc_tuning

    malloc_tuning.tune()  # before any tensor is allocated (each worker tunes its own)
    if settings.workers > 1:
        from rosettaserve.server.workers import supervise

        return supervise(settings)  # loads no model: its collector stays as Python has it
    gc_tuning.pause()  # until the models are loaded (Server settles it; so does each worker)
    import uvloop

    from rosettaserve.server.server import Server

    try:
        uvloop.run(Server(settings).run())
    except OSError as exc:
        print(f"rosettaserve: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


def run_scheduler(args: argparse.Namespace) -> int:
    import uvloop

    from rosettaserve.pd.scheduler import SchedulerOptions, serve
    from rosettaserve.transport.h1_head import H1Limits

    logging_setup.configure(args.log_level, args.log_format)
    security = checked_security(args, "rosettaserve scheduler")
    if security is None:
        return 1
    try:
        options = SchedulerOptions(
            prefill=tuple(args.prefill),
            decode=tuple(args.decode),
            host=args.host,
            http_port=args.http_port,
            policy=args.policy,
            max_retry=args.max_retry,
            token_timeout_s=args.token_timeout,
            discovery_s=args.discovery_interval,
            security=security,
            http_limits=H1Limits(**http_limits_of(args)),
        )
        uvloop.run(serve(options))
    except (OSError, ValueError) as exc:
        print(f"rosettaserve scheduler: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
