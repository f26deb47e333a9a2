"""The server's logging: one handler on the root logger, in text or JSON, every line with the
request id of the request it belongs to (``request_ids.REQUEST_ID``).

Lines are written in batches: those logged while the event loop runs one round of callbacks
(the access lines of every request answered in that round) leave in one write, at the end of
the round. A line logged outside the event loop's thread, and a warning or worse, is written at
once, with whatever waits before it; so are the lines left at exit (``logging.shutdown``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any, TextIO

import orjson

from rosettaserve.observability.request_ids import REQUEST_ID

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s{tag}: %(message)s"


class RequestIdFilter(logging.Filter):
    """Gives every record the request id of the context it is logged in ("" outside one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = REQUEST_ID.get()
        return True


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message``, then `` request_id=ID`` for a line of a request (an
    access line has the id in its message already)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)  # (a traceback follows it)
        request_id = getattr(record, "request_id", "")
        if request_id and not hasattr(record, "access"):
            return f"{line} request_id={request_id}"
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts (UTC, ISO 8601), level, logger, msg, request_id, the access
    fields of an access line as keys of their own, and exc (a traceback) when there is one."""

    def __init__(self, tag: str = "") -> None:
        super().__init__()
        self.tag = tag

    def format(self, record: logging.LogRecord) -> str:
        created = record.created
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
        doc: dict[str, Any] = {
            "ts": f"{stamp}.{int(created % 1 * 1000):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "request_id": getattr(record, "request_id", "") or None,
        }
        if self.tag:
            doc["worker"] = self.tag
        access = getattr(record, "access", None)
        if access is not None:
            doc.update(access)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            doc["exc"] = record.exc_text
        return orjson.dumps(doc).decode()


class BatchingHandler(logging.Handler):
    """Formats each record at once, writes the lines of one event-loop round together."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream
        self.pending: list[str] = []
        self.scheduled = False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self.pending.append(line)
        if record.levelno >= logging.WARNING:
            self.flush()
            return
        if self.scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on the event loop's thread
            self.flush()
            return
        self.scheduled = True
        loop.call_soon(self.flush)

    def flush(self) -> None:
        with self.lock if self.lock is not None else _NO_LOCK:
            self.scheduled = False
            if not self.pending:
                return
            text = "\n".join(self.pending) + "\n"
            self.pending = []
            try:
                self.stream.write(text)
                self.stream.flush()
            except (OSError, ValueError):  # stderr closed: the lines are dropped
                pass


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_LOCK = _NoLock()


def configure(level: str, fmt: str = "text", tag: str = "", stream: TextIO | None = None) -> None:
    """The root logger's one handler (any earlier one is replaced): ``level`` (debug, info,
    ...), ``fmt`` (text or json), ``tag`` (a worker's, shown in each line)."""
    # a record built per access line: no caller lookup, no process or thread names (unused)
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = BatchingHandler(stream or sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(tag))
    else:
        handler.setFormatter(TextFormatter(TEXT_FORMAT.format(tag=f"[{tag}]" if tag else "")))
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
