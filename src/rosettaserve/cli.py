"""`rosettaserve serve|...`: options to Settings, nothing more."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from rosettaserve import __version__
from rosettaserve.settings import (
    DEFAULT_GRPC_MAX_MESSAGE_SIZE,
    DEFAULT_MAX_REQUEST_SIZE,
    Settings,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rosettaserve",
        description="One model server for every serving protocol: the Open Inference Protocol (V2) "
        "over REST and gRPC today; see the README for what is built.",
    )
    parser.add_argument("--version", action="version", version=f"rosettaserve {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser(
        "serve",
        help="serve a model repository",
        description="Serve every model of a model repository (see the README for its layout).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
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
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log verbosity (logs go to stderr)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.repository.is_dir():
        print(f"rosettaserve: repository {args.repository} is not a folder", file=sys.stderr)
        return 2
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
        log_level=args.log_level,
    )
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return run(settings)


def run(settings: Settings) -> int:
    import uvloop

    from rosettaserve.server import Server

    try:
        uvloop.run(Server(settings).run())
    except OSError as exc:
        print(f"rosettaserve: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
