"""The serve command's options for logs and for browsers: the log format, the access log, CORS."""

from __future__ import annotations

import argparse

from rosettaserve.core.suggest import one_of
from rosettaserve.observability.logging_setup import FORMATS


def add_log_format(parser: argparse.ArgumentParser) -> None:
    """``--log-format`` (``serve`` and ``scheduler``; ``logging_setup.configure`` takes it)."""
    parser.add_argument(
        "--log-format",
        default="text",
        type=one_of(FORMATS),
        choices=FORMATS,
        help="every log line as text, or as one JSON object (ts, level, logger, msg, "
        "request_id; an access line's fields as keys) for log shippers",
    )


def add_log_options(serve: argparse.ArgumentParser) -> None:
    add_log_format(serve)
    serve.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="one line per request at INFO (logger rosettaserve.access): protocol, method or "
        "rpc, path or model, status, bytes, duration, request id; X-Request-ID / x-request-id "
        "echoed or made (off, or at --log-level warning or error: none of it, no cost)",
    )
    serve.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="let browser pages from ORIGIN (e.g. https://app.example.com; * for any) call the "
        "REST APIs: preflights answered, answers carry Access-Control-Allow-Origin "
        "(repeatable; off by default)",
    )
