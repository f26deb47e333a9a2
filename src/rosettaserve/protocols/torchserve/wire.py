"""What TorchServe's inference API hands a model and what it gets back, free of HTTP.

The routes (``protocols.torchserve.rest``) build a ``TsRequest`` from an HTTP request the way
TorchServe's frontend builds its worker's request (the body as one parameter named ``body``,
form fields one parameter each, every request header), and the ``torchserve`` runtime answers
with a ``TsAnswer`` (a whole body, or chunks as the handler streams them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from rosettaserve.core.registry import ModelVersion


@dataclass(frozen=True)
class Parameter:
    name: str
    content_type: str  # "" when the request had none
    value: bytes


@dataclass
class TsRequest:
    parameters: list[Parameter]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class TsAnswer:
    status: int
    content_type: str  # "": the handler set none
    headers: dict[str, str]
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None  # set: chunks after ``body``, the first one


class HandlerFailed(Exception):
    """The handler's batch failed: TorchServe answers every request of it with ``code`` and
    ``message`` (``Prediction failed``, 503, for an exception; the handler's own for a
    ``PredictionException``)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@runtime_checkable
class TsServable(Protocol):
    """A model that TorchServe's inference API can call: the ``torchserve`` runtime's."""

    async def serve(self, request: TsRequest) -> TsAnswer: ...


def servable(model: object) -> bool:
    """``isinstance(model, TsServable)``, as the protocol checks it (a ``serve`` method) without
    its cost: on Python 3.11 a runtime protocol's check walks the protocol's members, every
    request."""
    return callable(getattr(model, "serve", None))


@runtime_checkable
class TsScalable(Protocol):
    """A model whose handler instances the management API scales (``PUT /models/{m}``)."""

    workers: int

    async def scale(self, workers: int) -> None: ...


def default_version(versions: list[ModelVersion], chosen: dict[str, str]) -> ModelVersion:
    """The version TorchServe's APIs serve when none is named: the one ``set-default`` chose
    (``chosen``, by model name) while it is served, else the highest."""
    wanted = chosen.get(versions[-1].name)
    return next((v for v in versions if v.version == wanted), versions[-1])
