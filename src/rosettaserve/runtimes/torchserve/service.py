"""A handler loaded as TorchServe's worker loads it, run on the requests TorchServe would send.

TorchServe's Python package (``torchserve``, the ``[torchserve]`` extra; its Java frontend is
not used, no JRE is needed) brings ``ts.model_loader``, ``ts.service`` and the default handlers,
so a handler meets the same ``Service``, ``Context`` and entry-point rules it meets in
TorchServe's worker. What the worker's socket did is done here: request bodies are decoded as
the worker decodes them, and the frames a handler sends (the intermediate answers of
``send_intermediate_predict_response``) are read with ``frames.parse``; ``predict`` runs the
batches.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rosettaserve.protocols.torchserve.wire import Parameter
from rosettaserve.runtimes.torchserve import frames
from rosettaserve.runtimes.torchserve.mar import Archive

# the worker's own switch: "false" hands JSON and text bodies to the handler undecoded
DECODE_ENV = "TS_DECODE_INPUT_REQUEST"
_LOAD_LOCK = threading.Lock()  # sys.path and sys.modules are process-wide


class Metrics:
    """What ``context.metrics`` must answer for handlers that record metrics (TorchServe logs
    them for its frontend; here they are accepted and dropped)."""

    request_ids: Any = None

    def set_request_ids(self, request_ids: Any) -> None:
        self.request_ids = request_ids

    def _metric(self, *args: Any, **kwargs: Any) -> _Metric:
        return _Metric()

    add_metric = add_counter = add_time = add_size = add_percent = add_error = _metric
    get_metric = add_metric_to_cache = _metric


class _Metric:
    def add_or_update(self, *args: Any, **kwargs: Any) -> None:
        """Dropped (see ``Metrics``)."""

    update = add_or_update


def load_service(name: str, archive: Archive, batch_size: int) -> Any:
    """TorchServe's ``Service`` around the archive's handler, initialised."""
    from ts.model_loader import TsModelLoader

    folder = str(archive.folder)
    with _LOAD_LOCK:
        before = set(sys.modules)
        sys.path.insert(0, folder)
        try:
            service = TsModelLoader().load(
                name, folder, archive.handler, None, batch_size, None, True, Metrics()
            )
        finally:
            sys.path.remove(folder)
            # the handler's modules go, so another archive's handler.py imports its own; the
            # folder stays on the path's end for imports a handler makes while it serves
            for module in set(sys.modules) - before:
                if _inside(sys.modules[module], folder):
                    del sys.modules[module]
            sys.path.append(folder)
    return service


def forget(archive: Archive) -> None:
    """Undo what loading left process-wide: the archive's folder on the import path."""
    with _LOAD_LOCK:
        while str(archive.folder) in sys.path:
            sys.path.remove(str(archive.folder))


def _inside(module: Any, folder: str) -> bool:
    file = getattr(module, "__file__", None)
    return isinstance(file, str) and Path(file).resolve().is_relative_to(Path(folder).resolve())


def decoded(parameter: Parameter) -> Any:
    """A parameter's value as the worker decodes it: JSON bodies parsed, text decoded, anything
    else a bytearray (the worker's read buffer, which handlers may rely on), as is where the
    decoding fails."""
    if os.environ.get(DECODE_ENV, "true") == "true":
        try:
            if parameter.content_type == "application/json":
                return json.loads(parameter.value.decode("utf-8"))
            if parameter.content_type.startswith("text"):
                return parameter.value.decode("utf-8")
        except ValueError:
            pass
    return bytearray(parameter.value)


class FrameSocket:
    """``context.cl_socket`` for one batch: each frame the handler sends is parsed and passed on."""

    def __init__(self, on_frame: Callable[[frames.Frame], None]) -> None:
        self.on_frame = on_frame

    def sendall(self, data: bytes | bytearray) -> None:
        self.on_frame(frames.parse(data))
