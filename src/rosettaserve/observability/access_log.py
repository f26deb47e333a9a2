"""The access log: one line per request, HTTP (every REST protocol) and gRPC.

    http POST /v2/models/simple/infer 200 153 0.412ms 3f9a0c1b2d4e-1a
    grpc /inference.GRPCInferenceService/ModelInfer simple 0 176 0.380ms 3f9a0c1b2d4e-1b

protocol, method (gRPC: the rpc), path (gRPC: the model, "-" when the call names none),
status (gRPC: its status code), bytes of the answer's body, duration from the whole request to
its answer (a stream: to its end), request id. The line goes through ``logging`` (logger
``rosettaserve.access``, level INFO), built without a caller lookup, its text formatted by the
handler only; with ``--log-format json`` the same fields are keys of the line.

When the access log is off (``--no-access-log``) nothing here runs: the transports test one
attribute per request.
"""

from __future__ import annotations

import logging
from time import perf_counter

from rosettaserve.observability.request_ids import HEADER, accepted
from rosettaserve.settings import Settings

LOGGER = logging.getLogger("rosettaserve.access")
TEXT = "%s %s %s %s %d %.3fms %s"


def access_logged(settings: Settings) -> bool:
    """The access log is on with --access-log (the default) at --log-level info or debug (at
    warning, its lines would be dropped: the requests do not pay for them)."""
    return settings.access_log and settings.log_level in ("debug", "info")


class AccessLog:
    """Writes access lines (the transports call ``line``)."""

    __slots__ = ("logger",)

    def __init__(self, logger: logging.Logger = LOGGER) -> None:
        self.logger = logger

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
        logger = self.logger
        if not logger.isEnabledFor(logging.INFO):
            return
        ms = (perf_counter() - start) * 1000.0
        fields = {
            "protocol": protocol,
            "method": method,
            "path": path,
            "status": status,
            "bytes": nbytes,
            "duration_ms": round(ms, 3),
        }
        args = (protocol, method, path, status, nbytes, ms, request_id)
        extra = {"access": fields, "request_id": request_id}
        record = logger.makeRecord(logger.name, logging.INFO, "", 0, TEXT, args, None, extra=extra)
        logger.handle(record)


class CallRecord:
    """What the access line of one gRPC call needs, from its headers to its status."""

    __slots__ = ("access", "request_id", "rpc", "sent", "start")

    def __init__(self, access: AccessLog, rpc: str, metadata: list[tuple[str, str]]) -> None:
        self.access, self.rpc = access, rpc
        self.start = perf_counter()
        sent_id = None
        for name, value in metadata:
            if name == HEADER:
                sent_id = value
                break
        self.request_id = accepted(sent_id)
        self.sent = 0  # bytes of reply messages

    def finished(self, code: int) -> None:
        self.access.line(
            "grpc", self.rpc, "-", code, self.sent, start=self.start, request_id=self.request_id
        )
