"""One batch through a handler, as TorchServe's ``Service.predict`` runs it, without its frame.

``Service.predict`` hands the handler its batch and ``context`` and encodes what the handler
returns as a predict-response frame, which TorchServe's frontend reads back (and which
``frames.parse`` read here before): for a small request, building and reading that frame cost
as much as the handler itself. ``Handler.predict`` does what ``Service.predict`` does -- the
same ``data`` list, the same ``context`` state (request ids, request headers, the socket for
intermediate answers), the same failures -- and encodes each answer by the frame's rules
straight into a ``frames.Reply``: bytes as they are, text as UTF-8, a tensor as ``torch.save``
writes it, anything else as ``json.dumps(value, indent=2)``; the content type, status, phrase
and headers the handler set on the context. Intermediate answers
(``send_intermediate_predict_response``) still go through the frame: the handler builds it.
"""

from __future__ import annotations

import io
import itertools
import logging
import sys
import uuid
from typing import Any, Protocol

from rosettaserve.protocols.torchserve.wire import TsRequest
from rosettaserve.runtimes.torchserve import frames
from rosettaserve.runtimes.torchserve.answer_json import indented
from rosettaserve.runtimes.torchserve.mar import Archive
from rosettaserve.runtimes.torchserve.service import FrameSocket, decoded, load_service

log = logging.getLogger("ts.service")  # the logger TorchServe's worker reports these on


class Unencodable(Exception):
    """An answer none of the frame's rules encodes (TorchServe: the whole batch fails)."""


class Predictor(Protocol):
    """A worker's handler: ``Handler`` in this process, ``process.Remote`` in its own."""

    runs_here: bool  # its work is done in this process (the event loop may call it when cheap)

    def predict(self, requests: list[TsRequest], socket: FrameSocket) -> frames.Frame: ...

    def close(self) -> None: ...


_ID_PREFIX = str(uuid.uuid4())[:24]  # this process's; each id ends with a count of its own
_ids = itertools.count()


def request_id() -> str:
    """A request id in the form of TorchServe's (a UUID's text), unique to this process's
    life: uuid4 reads the kernel's random source for each (4% of a small request's time)."""
    return f"{_ID_PREFIX}{next(_ids) & 0xFFFFFFFFFFFF:012x}"


def load(name: str, archive: Archive, batch_size: int) -> Handler:
    return Handler(load_service(name, archive, batch_size))


class Handler:
    """A loaded ``ts.service.Service`` (TorchServe 0.12's), called without its frame."""

    runs_here = True

    def __init__(self, service: Any) -> None:
        from ts.context import RequestProcessor
        from ts.utils.util import PredictionException

        self.service = service
        self.context = service.context
        self.entry_point = service._entry_point
        self._processor = RequestProcessor
        self._refusal = PredictionException

    def close(self) -> None:
        """Nothing to release: the handler goes with the server's process."""

    def predict(self, requests: list[TsRequest], socket: FrameSocket) -> frames.Frame:
        ids = {i: request_id() for i in range(len(requests))}
        data, processors = [], []
        for request in requests:
            values, headers = self._inputs(request)
            data.append(values)
            processors.append(self._processor(headers))
        context = self.context
        context.request_ids = ids
        context.request_processor = processors
        context.metrics.request_ids = ids
        context.cl_socket = socket
        self.service.cl_socket = socket
        try:
            answers = self.entry_point(data, context)
        except MemoryError:
            log.error("System out of memory", exc_info=True)
            return frames.Frame(507, "Out of resources", [])
        except self._refusal as exc:
            log.error("Prediction error", exc_info=True)
            return frames.Frame(exc.error_code, exc.message, [])
        except Exception as exc:
            if "CUDA" in str(exc):
                log.error("CUDA out of memory", exc_info=True)
                return frames.Frame(507, "Out of resources", [])
            log.warning("Invoking custom service failed.", exc_info=True)
            return frames.Frame(503, "Prediction failed", [])
        return self._answer(answers, len(requests))

    @staticmethod
    def _inputs(request: TsRequest) -> tuple[dict[str, Any], dict[str, Any]]:
        """A request's entry of ``data`` and its headers, as ``Service`` builds them: each
        parameter by name (and its content type), then the request's headers."""
        values: dict[str, Any] = {}
        headers: dict[str, Any] = {}
        for parameter in request.parameters:
            values[parameter.name] = decoded(parameter)
            headers[parameter.name] = {"content-type": parameter.content_type}
        headers.update(request.headers)
        return values, headers

    def _answer(self, answers: Any, count: int) -> frames.Frame:
        if not isinstance(answers, list):
            log.warning(
                "model: %s, Invalid return type: %s.", self.context.model_name, type(answers)
            )
            return frames.Frame(503, "Invalid model predict output", [])
        if len(answers) != count:
            log.warning(
                "model: %s, number of batch response mismatched, expect: %d, got: %d.",
                self.context.model_name,
                count,
                len(answers),
            )
            return frames.Frame(503, "number of batch response mismatched", [])
        try:
            replies = [self._reply(i, answer) for i, answer in enumerate(answers)]
        except Unencodable:
            log.warning("Unable to serialize model output.", exc_info=True)
            return frames.Frame(503, "Unsupported model output data type.", [])
        return frames.Frame(200, "Prediction success", replies)

    def _reply(self, i: int, answer: Any) -> frames.Reply:
        context = self.context
        if context.stopping_criteria:
            stop = context.stopping_criteria[i](answer)
            if stop is not None:
                context.set_response_header(i, "ts_stream_next", "false" if stop else "true")
        elif context.get_response_headers(i).get("ts_stream_next") == "true":
            context.set_response_header(i, "ts_stream_next", "false")  # this answer is the last
        status, phrase = context.get_response_status(i)
        headers = context.get_response_headers(i)
        if not isinstance(status, int) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):  # the frame cannot carry them: TorchServe's worker fails on the batch
            raise TypeError("a status or response header the frame cannot carry")
        return frames.Reply(
            context.request_ids[i],
            context.get_response_content_type(i) or "",
            status,
            phrase or "",
            dict(headers),
            encode(answer),
        )


def encode(answer: Any) -> bytes:
    """An answer's body by the frame's rules (bytes before text, as TorchServe checks them)."""
    if isinstance(answer, (bytes, bytearray)):
        return bytes(answer)
    if isinstance(answer, str):
        return answer.encode("utf-8")
    torch = sys.modules.get("torch")  # (not imported: the answer is no tensor)
    if torch is not None and isinstance(answer, torch.Tensor):
        buffer = io.BytesIO()
        torch.save(answer, buffer)
        return buffer.getvalue()
    try:
        return indented(answer)
    except TypeError as exc:
        raise Unencodable(str(exc)) from exc
