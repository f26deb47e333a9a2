"""The server's logging: one handler on the root logger, in text or JSON, every line with the
request id of the request it belongs to (``request_ids.REQUEST_ID``).

Access lines skip ``logging``'s record machinery (a ``LogRecord``, the logger's and the
handler's filters and locks, the formatter): ``configure`` leaves an ``AccessWriter`` in
``ACCESS`` that formats them in the handler's format and adds them to its batch; ``ACCESS`` is
None when the level drops them (then ``access_log`` goes through ``logging``, which drops them).

Lines are written in batches: those logged on the event loop's thread within
``FLUSH_DELAY_S`` of the first one (the access lines of every request answered meanwhile) leave
in one write, or every ``MAX_PENDING`` lines. (A write per loop round cost a REST request a
quarter of the access log's price when one request is answered a round.) A line logged outside
the event loop's thread, and a warning or worse, is written at once, with whatever waits before
it; so are the lines left at exit (``logging.shutdown``).
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
# lines held for the end of the round at most: a round may answer thousands of pipelined requests
MAX_PENDING = 256
# an INFO line waits this long at most for the lines after it (one write for all of them)
FLUSH_DELAY_S = 0.005
ACCESS_LOGGER = "rosettaserve.access"


def access_fields(args: tuple[object, ...]) -> dict[str, object]:
    """An access line's fields by name (the JSON format's keys), from its record's ``args``
    (protocol, method, path, status, bytes, milliseconds, request id)."""
    protocol, method, path, status, nbytes, ms, _ = args
    return {
        "protocol": protocol,
        "method": method,
        "path": path,
        "status": status,
        "bytes": nbytes,
        "duration_ms": round(ms, 3) if isinstance(ms, float) else ms,
    }


class RequestIdFilter(logging.Filter):
    """Gives every record the request id of the context it is logged in ("" outside one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = REQUEST_ID.get()
        return True


class _Stamps:
    """A record's time as text, the strftime part made once a second, the milliseconds' text
    taken from a table (an integer's ``:03d`` format costs a third of an access line)."""

    def __init__(self, pattern: str, convert: Any, decimal: str, suffix: str = "") -> None:
        self.pattern, self.convert = pattern, convert
        # 1000 entries, and 999 again should a float round (created - second) * 1000 up
        self.millis = [f"{decimal}{ms:03d}{suffix}" for ms in (*range(1000), 999)]
        self.cached: tuple[int, str] = (-1, "")

    def __call__(self, created: float) -> str:
        second = int(created)
        cached = self.cached  # (one read: another thread may replace it meanwhile)
        if cached[0] != second:
            cached = (second, time.strftime(self.pattern, self.convert(second)))
            self.cached = cached
        return cached[1] + self.millis[int((created - second) * 1000)]


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message``, then `` request_id=ID`` for a line of a request (an
    access line has the id in its message already), then a traceback if there is one."""

    def __init__(self, tag: str = "") -> None:
        super().__init__()
        self.tag = f"[{tag}]" if tag else ""
        self.stamp = _Stamps("%Y-%m-%d %H:%M:%S", time.localtime, ",")

    def format(self, record: logging.LogRecord) -> str:
        line = (
            f"{self.stamp(record.created)} {record.levelname} {record.name}{self.tag}: "
            f"{record.getMessage()}"
        )
        request_id = getattr(record, "request_id", "")
        if request_id and not hasattr(record, "access"):
            line = f"{line} request_id={request_id}"
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line = f"{line}\n{record.exc_text}"
        if record.stack_info:
            line = f"{line}\n{self.formatStack(record.stack_info)}"
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts (UTC, ISO 8601), level, logger, msg, request_id, the access
    fields of an access line as keys of their own, and exc (a traceback) when there is one."""

    def __init__(self, tag: str = "") -> None:
        super().__init__()
        self.tag = tag
        self.stamp = _Stamps("%Y-%m-%dT%H:%M:%S", time.gmtime, ".", "Z")

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": self.stamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "request_id": getattr(record, "request_id", "") or None,
        }
        if self.tag:
            doc["worker"] = self.tag
        if getattr(record, "access", False) and isinstance(record.args, tuple):
            doc.update(access_fields(record.args))
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            doc["exc"] = record.exc_text
        return orjson.dumps(doc).decode()


class BatchingHandler(logging.Handler):
    """Formats each record at once, writes the lines of ``FLUSH_DELAY_S`` together."""

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
        pending = self.pending
        pending.append(line)
        if record.levelno >= logging.WARNING or len(pending) >= MAX_PENDING:
            self.flush()
            return
        if not self.scheduled:
            self.schedule()

    def schedule(self) -> None:
        """The batch written in ``FLUSH_DELAY_S`` (at once outside the event loop)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on the event loop's thread
            self.flush()
            return
        self.scheduled = True
        loop.call_later(FLUSH_DELAY_S, self.flush)

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


class AccessWriter:
    """Formats access lines as the handler's formatter would (same text, same JSON keys) and
    adds them to the handler's batch: no ``LogRecord``, filter, lock round or formatter call
    per line; the text line's constant parts made once."""

    __slots__ = ("handler", "json_tag", "prefix", "stamp")

    def __init__(self, handler: BatchingHandler, fmt: str, tag: str) -> None:
        self.handler = handler
        self.json_tag = tag if fmt == "json" else None
        if fmt == "json":
            self.stamp = _Stamps("%Y-%m-%dT%H:%M:%S", time.gmtime, ".", "Z")
        else:
            self.stamp = _Stamps("%Y-%m-%d %H:%M:%S", time.localtime, ",")
        self.prefix = f" INFO {ACCESS_LOGGER}{f'[{tag}]' if tag else ''}: "

    def line(
        self,
        protocol: str,
        method: str,
        path: str,
        status: int,
        nbytes: int,
        *,
        ms: float,
        request_id: str,
    ) -> None:
        text = f"{protocol} {method} {path} {status} {nbytes} {ms:.3f}ms {request_id}"
        tag = self.json_tag
        if tag is None:
            line = f"{self.stamp(time.time())}{self.prefix}{text}"
        else:
            doc: dict[str, Any] = {  # (the keys in JsonFormatter's order, a worker's aside)
                "ts": self.stamp(time.time()),
                "level": "INFO",
                "logger": ACCESS_LOGGER,
                "msg": text,
                "request_id": request_id or None,
                "protocol": protocol,
                "method": method,
                "path": path,
                "status": status,
                "bytes": nbytes,
                "duration_ms": round(ms, 3),
            }
            if tag:
                doc["worker"] = tag
            line = orjson.dumps(doc).decode()
        # to the batch as ``emit`` adds an INFO record's line, under the handler's lock
        handler = self.handler
        with handler.lock if handler.lock is not None else _NO_LOCK:
            pending = handler.pending
            pending.append(line)
            if len(pending) >= MAX_PENDING:
                handler.flush()
            elif not handler.scheduled:
                handler.schedule()


# set by ``configure``: access lines go here, or through ``logging`` when None
ACCESS: AccessWriter | None = None


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
        handler.setFormatter(TextFormatter(tag))
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    global ACCESS  # noqa: PLW0603 - the access lines' writer of the one handler
    enabled = logging.getLogger(ACCESS_LOGGER).isEnabledFor(logging.INFO)
    ACCESS = AccessWriter(handler, fmt, tag) if enabled else None
