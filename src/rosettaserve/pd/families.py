"""The five LLM API families as the scheduler sees them: their paths, and the forms their errors
take (a whole reply, or a last chunk of a stream that already began).

The scheduler forwards bodies without reading them; it reads one only to shape an error for
``POST /generate``, which TGI and vLLM share (``prompt`` means vLLM, as instances decide).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import orjson

from rosettaserve.core.errors import ServingError
from rosettaserve.protocols.mindie import rest as mindie
from rosettaserve.protocols.openai import convert as openai_convert
from rosettaserve.protocols.openai import rest as openai
from rosettaserve.protocols.tgi import convert as tgi_convert
from rosettaserve.protocols.tgi import rest as tgi
from rosettaserve.protocols.triton_generate import rest as triton
from rosettaserve.protocols.vllm import rest as vllm
from rosettaserve.transport.routing import HttpResponse

TRITON = r"/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[0-9]+))?"


@dataclass(frozen=True)
class Family:
    name: str
    error_response: Callable[[ServingError], HttpResponse]
    stream_error: Callable[[ServingError, bytes], bytes]  # (error, the stream so far) -> chunk


def _openai_chunk(exc: ServingError, _: bytes) -> bytes:
    return openai_convert.sse(openai_convert.error_doc(exc)) + openai_convert.DONE


def _tgi_chunk(exc: ServingError, _: bytes) -> bytes:
    return tgi_convert.sse(tgi_convert.error_doc(exc))


def _vllm_chunk(exc: ServingError, first: bytes) -> bytes:
    return orjson.dumps({"error": exc.message}) + (b"\0" if first.endswith(b"\0") else b"\n")


def _triton_chunk(exc: ServingError, _: bytes) -> bytes:
    return triton.sse({"error": exc.message})


def _mindie_chunk(exc: ServingError, _: bytes) -> bytes:
    return mindie.sse({"error": exc.message, "error_type": "Incomplete Generation"})


OPENAI = Family("openai", openai.error_response, _openai_chunk)
TGI = Family("tgi", tgi.error_response, _tgi_chunk)
VLLM = Family("vllm", vllm.error_response, _vllm_chunk)
TRITON_GENERATE = Family("triton", triton.error_response, _triton_chunk)
MINDIE = Family("mindie", vllm.error_response, _mindie_chunk)

# (path pattern, family); POST /generate is TGI's unless the body says vLLM
ROUTES: list[tuple[str, Family]] = [
    ("/v1/chat/completions", OPENAI),
    ("/v1/completions", OPENAI),
    ("/generate", TGI),
    ("/generate_stream", TGI),
    ("/", TGI),
    (TRITON + "/generate", TRITON_GENERATE),
    (TRITON + "/generate_stream", TRITON_GENERATE),
    ("/infer", MINDIE),
    ("/infer_token", MINDIE),
]


def family_of(path: str, family: Family, body: bytes | bytearray) -> Family:
    if path != "/generate":
        return family
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return family
    is_vllm = isinstance(doc, dict) and "inputs" not in doc and "prompt" in doc
    return VLLM if is_vllm else family


def stream_content_type(family: Family, first: bytes) -> str:
    """The media type of a stream, as the instance would have sent it."""
    if family is VLLM:
        return "application/octet-stream" if first.endswith(b"\0") else "application/x-ndjson"
    if family is TRITON_GENERATE:
        return "text/event-stream; charset=utf-8"
    return "text/event-stream"
