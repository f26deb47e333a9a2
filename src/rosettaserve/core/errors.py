"""The ONE error hierarchy. Every protocol maps these through core.status."""

from __future__ import annotations

import contextlib
import logging

from rosettaserve.core.status import ErrorKind

log = logging.getLogger("rosettaserve.model")

# The most of an error message a client is sent, in UTF-8 bytes. A message may carry what a model
# raised or what a request held (5 MB were echoed whole); gRPC sends it percent-encoded in the
# grpc-message trailer (up to 3 bytes a byte), and clients refuse metadata over 8 KiB.
MAX_MESSAGE_BYTES = 2048


def bounded(message: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """``message`` cut to ``limit`` UTF-8 bytes (on a character boundary), with how much is
    left out said at its end."""
    if len(message) <= limit and (message.isascii() or len(message.encode()) <= limit):
        return message
    head = message[:limit].encode()[:limit].decode(errors="ignore")
    return f"{head}… ({len(message) - len(head)} more characters)"


class ServingError(Exception):
    """What every protocol answers with: its status from ``kind`` (core.status), its message
    bounded (``bounded``), wherever it came from."""

    kind: ErrorKind = ErrorKind.INTERNAL

    def __init__(self, message: str, *, headers: dict[str, str] | None = None) -> None:
        message = bounded(message)
        super().__init__(message)
        self.message = message
        self.headers = headers or {}

    @property
    def http_status(self) -> int:
        return self.kind.http


class InvalidInput(ServingError):
    """The caller's request is malformed or does not fit the model (400)."""

    kind = ErrorKind.INVALID_ARGUMENT


class ModelNotFound(ServingError):
    kind = ErrorKind.NOT_FOUND


class NotFound(ServingError):
    """A route or resource that is not a model does not exist."""

    kind = ErrorKind.NOT_FOUND


class MethodNotAllowed(ServingError):
    kind = ErrorKind.METHOD_NOT_ALLOWED


class ModelNotReady(ServingError):
    kind = ErrorKind.UNAVAILABLE


class PayloadTooLarge(ServingError):
    kind = ErrorKind.PAYLOAD_TOO_LARGE


class Overloaded(ServingError):
    kind = ErrorKind.OVERLOADED


class DeadlineExceeded(ServingError):
    kind = ErrorKind.DEADLINE_EXCEEDED


class Cancelled(ServingError):
    kind = ErrorKind.CANCELLED


class Unsupported(ServingError):
    kind = ErrorKind.UNIMPLEMENTED


class Forbidden(ServingError):
    kind = ErrorKind.FORBIDDEN


class Unauthenticated(ServingError):
    """The request carries no valid API key (401 with WWW-Authenticate / UNAUTHENTICATED)."""

    kind = ErrorKind.UNAUTHENTICATED


class ModelError(ServingError):
    """The model itself failed (500)."""

    kind = ErrorKind.INTERNAL


_ORIGIN = "_rosettaserve_origin_traceback"


def keep_origin(exc: BaseException) -> None:
    """Remember where ``exc`` was raised, for the log: raised on a model's thread and awaited
    from code compiled by mypyc, it arrives with a traceback that starts at that ``await``."""
    with contextlib.suppress(AttributeError):
        setattr(exc, _ORIGIN, exc.__traceback__)


def served_as(exc: Exception, model: str = "") -> ServingError | None:
    """What a model's exception becomes: a ValueError means bad input (400), anything else is
    the model's fault (None: it is a ServingError already, and goes on as it is).

    This is where a model's failure is logged, once: its traceback at ERROR (the client gets
    the short message); a ValueError, the caller's fault, at INFO without one. ``model``: which
    model (``name version N``); the request id comes with the line (logging_setup)."""
    if isinstance(exc, ServingError):
        return None
    which = f"model {model}" if model else "a model"
    if isinstance(exc, ValueError):
        log.info("%s rejected its input: %s", which, exc)
        return InvalidInput(str(exc) or "the model rejected the input")
    origin = getattr(exc, _ORIGIN, None) or exc.__traceback__
    kind = type(exc)
    log.error("%s failed: %s: %s", which, kind.__name__, exc, exc_info=(kind, exc, origin))
    return ModelError(f"{type(exc).__name__}: {exc}")


class ModelErrors:
    """``served_as`` around a block (a class rather than a generator-based context manager)."""

    def __init__(self, model: str = "") -> None:
        self.model = model

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, Exception):
            error = served_as(exc, self.model)
            if error is not None:
                raise error from exc


MODEL_ERRORS = ModelErrors()  # for a model call that names no model
