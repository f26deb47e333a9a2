"""Calls from one served model to another (Triton's business-logic scripting, and the steps of an
ensemble): the callee is reached through the data plane, as a client's request would be, so its
queue, batcher, timeout and statistics apply; the arrays go as they are, never copied.

A model gets its ``ModelCalls`` when its version is loaded (the server hands the data plane to
the repository's factory). ``Model.infer`` and ``Model.infer_async`` (core/model.py) use it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from rosettaserve.core import dtypes
from rosettaserve.core.call import PROTOCOL, TIMEOUT_US
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

PROTOCOL_NAME = "model_call"  # the protocol label of a call a model made (metrics, access log)


class Infers(Protocol):
    """What a call needs of the data plane."""

    async def infer(self, request: InferenceRequest) -> InferenceResponse: ...


class ModelCalls:
    """The data plane, as a model calls it (from the event loop or from a model's own thread)."""

    def __init__(self, plane: Infers) -> None:
        self.plane = plane
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread = 0

    def bind(self) -> None:
        """On the event loop's thread, before any model loads: the loop the calls go to."""
        self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()

    async def infer(
        self,
        model: str,
        inputs: Mapping[str, np.ndarray],
        version: str | None = None,
        *,
        outputs: list[str] | None = None,
        timeout_us: int | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> dict[str, np.ndarray]:
        """The callee's outputs by name (``outputs``: only these); its errors raise here, as the
        ServingError it answered (its kind and message)."""
        request = _request(model, inputs, version, outputs=outputs, timeout_us=timeout_us)
        request.parameters = dict(parameters or {})
        response = await self.plane.infer(request)
        return {t.name: t.data for t in response.outputs}

    def infer_blocking(self, model: str, inputs: Mapping[str, np.ndarray], **kw: Any) -> Any:
        """``infer`` from a model's own thread: it waits there while the event loop runs it."""
        if self.loop is None or threading.get_ident() == self.loop_thread:
            raise RuntimeError(
                "Model.infer blocks, and was called on the event loop thread: make predict "
                "'async def' and call 'await self.infer_async(...)'"
            )
        return asyncio.run_coroutine_threadsafe(self.infer(model, inputs, **kw), self.loop).result()


def _request(
    model: str,
    inputs: Mapping[str, np.ndarray],
    version: str | None,
    *,
    outputs: list[str] | None,
    timeout_us: int | None,
) -> InferenceRequest:
    tensors = [_tensor(name, value) for name, value in inputs.items()]
    context: dict[str, Any] = {PROTOCOL: PROTOCOL_NAME}
    if timeout_us is not None:
        context[TIMEOUT_US] = max(1, int(timeout_us))  # (0 would mean: no timeout)
    wanted = None if outputs is None else [RequestedOutput(name) for name in outputs]
    return InferenceRequest(
        model,
        tensors,
        model_version="" if version in (None, "", "-1", -1) else str(version),
        outputs=wanted,
        context=context,
    )


def _tensor(name: str, value: Any) -> Tensor:
    array = np.asarray(value)
    if array.dtype.kind in "SU":  # text as the callee gets it from a client: bytes objects
        array = np.vectorize(_as_bytes, otypes=[object])(array) if array.size else array
        array = array.astype(object)
    try:
        datatype = dtypes.from_numpy(array.dtype).name
    except TypeError as exc:
        raise InvalidInput(f"input '{name}' of a model call: {exc}") from None
    return Tensor(name, datatype, tuple(array.shape), array)


def _as_bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)
