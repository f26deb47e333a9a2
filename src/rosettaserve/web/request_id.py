"""The request id's vocabulary: its header (HTTP ``X-Request-ID``, gRPC ``x-request-id``) and
the context variable that holds it while a request is served, for the request's log lines.
The transports set it and send it back; rosettaserve.observability makes and checks ids
(``request_ids``) and reads the variable (``logging_setup``)."""

from __future__ import annotations

from contextvars import ContextVar

HEADER = "x-request-id"

REQUEST_ID: ContextVar[str] = ContextVar("rosettaserve_request_id", default="")
