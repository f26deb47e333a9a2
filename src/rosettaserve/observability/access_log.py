"""The access log: one line per request, HTTP (every REST protocol) and gRPC.

    http POST /v2/models/simple/infer 200 153 0.412ms 3f9a0c1b2d4e-1a
    grpc /inference.GRPCInferenceService/ModelInfer simple 0 176 0.380ms 3f9a0c1b2d4e-1b

protocol, method (gRPC: the rpc), path (gRPC: the model the request names, ``name/version`` with a
version, "-" when it names none; its service's ``model_of`` reads it, only while the log is on),
status (gRPC: its status code), bytes of the answer's body, duration from the whole request to
its answer (a stream: to its end), request id. With the server's log handler
(``logging_setup.configure``) the line is formatted by its ``AccessWriter`` and joins the
handler's batch without a ``LogRecord``; otherwise it goes through ``logging`` (logger
``rosettaserve.access``, level INFO). With ``--log-format json`` the same fields are keys of the
line.

When the access log is off (``--no-access-log``) nothing here runs: the transports test one
attribute per request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from time import perf_counter, time
from typing import Any

from rosettaserve.observability import logging_setup
from rosettaserve.observability.logging_setup import ACCESS_LOGGER as LOGGER_NAME
from rosettaserve.observability.request_ids import HEADER, accepted, new_id

LOGGER = logging.getLogger(LOGGER_NAME)
TEXT = "%s %s %s %s %d %.3fms %s"
REFUSED_URL = 256  # bytes of a refused request's target in its line


def access_logged(access_log: bool, log_level: str) -> bool:
    """The access log is on with --access-log (the default) at --log-level info or debug (at
    warning, its lines would be dropped: the requests do not pay for them)."""
    return access_log and log_level in ("debug", "info")


class AccessRecord(logging.LogRecord):
    """A ``LogRecord`` for an access line, built with what a line of the server's handlers reads
    and no more (``LogRecord.__init__`` splits a source path and reads the thread's and the
    process's names: a third of an access line's cost)."""

    def __init__(self, args: tuple[object, ...], request_id: str) -> None:
        now = time()
        self.name, self.msg, self.args = LOGGER_NAME, TEXT, args
        self.levelname, self.levelno = "INFO", logging.INFO
        self.pathname = self.filename = self.module = ""
        self.exc_info = self.exc_text = self.stack_info = None
        self.funcName = ""
        self.lineno = 0
        self.created = now
        self.msecs = int((now - int(now)) * 1000) + 0.0
        self.relativeCreated = 0.0
        self.thread = self.threadName = self.processName = self.process = None
        self.access, self.request_id = True, request_id  # the fields: ``access_fields(args)``


class AccessLog:
    """Writes access lines (the transports call ``line``)."""

    __slots__ = ("logger",)

    def __init__(self) -> None:
        self.logger = LOGGER

    def line(
        self,
        protocol: str,
        method: str,
        path: str,
        status: int,
        nbytes: int,
        *,
        start: float,
        request_id: str,
    ) -> None:
        """One request done (``start``: its ``time.perf_counter()`` when it was whole)."""
        ms = (perf_counter() - start) * 1000.0
        writer = logging_setup.ACCESS
        if writer is not None:
            writer.line(protocol, method, path, status, nbytes, ms=ms, request_id=request_id)
            return
        logger = self.logger
        if not logger.isEnabledFor(logging.INFO):
            return
        args = (protocol, method, path, status, nbytes, ms, request_id)
        logger.handle(AccessRecord(args, request_id))

    def call_lines(self) -> Callable[[str, list[tuple[str, str]]], CallRecord]:
        """What makes a gRPC call's line from its path and metadata (the gRPC server's
        ``call_lines``): the record's class with this log bound, called as it is per call."""
        return partial(CallRecord, self)

    def refused(self, method: str, url: bytes, status: int, nbytes: int) -> None:
        """A request the HTTP/1.1 server answered itself (400, 408, 413, 414, 431, 501, 505),
        with the method and target as far as they arrived: no application saw it, and it has
        no request id ("-"). The target is cut at ``REFUSED_URL`` bytes, escaped as Python
        writes bytes (a hostile one cannot break the line)."""
        path = repr(url[:REFUSED_URL])[2:-1] + ("..." if len(url) > REFUSED_URL else "")
        nbytes = 0 if method == "HEAD" else nbytes
        self.line(
            "http", method or "-", path or "-", status, nbytes, start=perf_counter(), request_id="-"
        )


def model_path(name: str, version: str) -> str:
    """A gRPC line's path: the model a request names (``name/version`` when it names one),
    "-" when it names none."""
    if not name:
        return "-"
    return f"{name}/{version}" if version else name


def named_in(message: Any) -> str:
    """``model_path`` of a protobuf request naming its model in fields ``model_name`` or
    ``name`` (and ``model_version`` or ``version``), as OIP's do."""
    name = getattr(message, "model_name", None)
    version = getattr(message, "model_version", "")
    if name is None:
        name = getattr(message, "name", "")
        version = getattr(message, "version", "")
    return model_path(name, version) if isinstance(name, str) else "-"


class CallRecord:
    """What the access line of one gRPC call needs, from its headers to its status; ``path``:
    the model its (first) request names, from its service's ``model_of`` (``named``)."""

    __slots__ = ("access", "path", "request_id", "rpc", "sent", "start")

    def __init__(self, access: AccessLog, rpc: str, metadata: list[tuple[str, str]]) -> None:
        self.access, self.rpc = access, rpc
        self.start = perf_counter()
        sent_id = None
        for name, value in metadata:
            if name == HEADER:
                sent_id = value
                break
        self.request_id = new_id() if sent_id is None else accepted(sent_id)
        self.sent = 0  # bytes of reply messages
        self.path = ""  # not looked for yet

    def named(self, model_of: Callable[[Any], str] | None, request: Any) -> None:
        """A request of the call arrived: the model it names, unless known from an earlier."""
        if not self.path:
            self.path = "-" if model_of is None else model_of(request)

    def finished(self, code: int) -> None:
        path = self.path or "-"
        self.access.line(
            "grpc", self.rpc, path, code, self.sent, start=self.start, request_id=self.request_id
        )
