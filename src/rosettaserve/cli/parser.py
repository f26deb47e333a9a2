"""The command line's parser: the ``serve`` and ``scheduler`` commands and their options (the
option groups they share: option_groups.py; help texts: help.py; log options: logs.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rosettaserve import __version__
from rosettaserve.cli import help as cli_help
from rosettaserve.cli.logs import add_log_format, add_log_options
from rosettaserve.cli.option_groups import (
    add_http_limits,
    add_llm_api_options,
    add_pd_options,
    add_response_cache,
    add_security_options,
    non_negative,
    positive,
    positive_float,
)
from rosettaserve.core.suggest import one_of
from rosettaserve.observability.tracing import EXPORTERS
from rosettaserve.repository.model_yaml import LOAD_MODES
from rosettaserve.repository.residency import parse_size
from rosettaserve.server.settings import DEFAULT_GRPC_MAX_MESSAGE_SIZE, DEFAULT_MAX_REQUEST_SIZE

LOG_LEVELS = ("debug", "info", "warning", "error")
POLICIES = ("prefix", "load", "round-robin")  # how the scheduler picks an instance


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
        "--allow-client-shm",
        nargs="?",
        const="true",
        default="false",
        type=str.lower,
        choices=("true", "false"),
        help="let clients register system shared-memory regions (Triton's flag, also as "
        "--allow-client-shm=true); off, register and unregister answer 501",
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
    add_llm_api_options(serve)
    add_scaling_options(serve)
    add_response_cache(serve)
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


def add_scheduler_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sched = commands.add_parser(
        "scheduler",
        help="split LLM requests between prefill and decode instances",
        description="Accept the LLM API families and serve each request with a prefill "
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
        default="prefix",
        help="how instances are chosen: prefill by load and the prompt prefix its cache "
        "holds (prefix), the least loaded (load), or each in turn (round-robin)",
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
        type=positive_float,
        default=10.0,
        metavar="SECONDS",
        help="look instance URLs whose host is a DNS name up again this often (instances "
        "come and go with its addresses)",
    )
    sched.add_argument("--log-level", default="info", type=one_of(LOG_LEVELS), choices=LOG_LEVELS)
    add_log_format(sched)
    add_llm_api_options(sched)  # under PD the scheduler keeps the Responses API's answers
    add_http_limits(sched)
    add_security_options(sched)


def add_scaling_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--workers",
        type=positive,
        default=1,
        metavar="N",
        help="serve with N processes sharing the ports (SO_REUSEPORT); each loads every model",
    )
    serve.add_argument(
        "--max-queue-size",
        type=non_negative,
        default=0,
        metavar="N",
        help="per model version: requests waiting beyond N are refused at once with 429 / "
        "RESOURCE_EXHAUSTED (0 = no limit; model.yaml max_queue_size wins); for an LLM, the "
        "requests waiting are those beyond its engine's max_num_seqs; with API keys, a key "
        "under its weighted share is still admitted (at most 2N waiting)",
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
        "--stall-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="a model version whose engine or instances finish nothing this long while work "
        "waits turns not ready (503, with the reason) until it moves again (0 = never)",
    )
    serve.add_argument(
        "--load",
        type=one_of(LOAD_MODES),
        choices=LOAD_MODES,
        default="eager",
        help="eager: every version loads at start; lazy: on its first request, which waits "
        "for it (model.yaml load wins); the server is ready without the lazy ones",
    )
    serve.add_argument(
        "--load-timeout",
        type=positive_float,
        default=300.0,
        metavar="SECONDS",
        help="the longest a request waits for its version to load on demand (then 503)",
    )
    serve.add_argument(
        "--memory-budget",
        type=_size,
        default=0,
        metavar="SIZE",
        help="memory the loaded versions may hold together, e.g. 12GiB (measured per version as "
        "the process's growth while it loaded): a load past it unloads the least recently used "
        "idle versions first (0 = no budget)",
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
        "--management-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve TorchServe's management API on this port only, model control on, as "
        "TorchServe does on 8081 (0 = any free)",
    )
    serve.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Prometheus /metrics on this port instead of the HTTP port (0 = any free)",
    )


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
