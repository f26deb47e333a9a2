"""`rosettaserve serve|scheduler`: the command line to settings (settings.py), then the process
(server/); no logic of its own. The parser: parser.py."""

from __future__ import annotations

import argparse
import sys

from rosettaserve.cli.parser import build_parser
from rosettaserve.cli.settings import (
    checked_security,
    http_limits_of,
    scheduler_options,
    serve_settings,
)
from rosettaserve.core.suggest import parse_args
from rosettaserve.observability import logging_setup
from rosettaserve.server.settings import Settings


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
    settings = serve_settings(args, security)
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

    from rosettaserve.server.scheduler_process import serve
    from rosettaserve.transport.h1_head import H1Limits

    logging_setup.configure(args.log_level, args.log_format)
    security = checked_security(args, "rosettaserve scheduler")
    if security is None:
        return 1
    limits = H1Limits(**http_limits_of(args))
    try:
        uvloop.run(serve(scheduler_options(args), security, limits))
    except (OSError, ValueError) as exc:
        print(f"rosettaserve scheduler: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
