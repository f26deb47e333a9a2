"""TGI routes: ``/generate``, ``/generate_stream``, ``/`` (what the text-generation client
calls), ``/info``, ``/health``.

``POST /generate`` is shared with vLLM's simple API, told apart by the body as MindIE does:
``prompt`` means vLLM, ``inputs`` means TGI.
"""

from __future__ import annotations

from typing import Any

from rosettaserve.core.errors import InvalidInput, ServingError
from rosettaserve.core.generate import Fields, GenerateDelta, TextGenerator, json_object
from rosettaserve.core.generation_plane import GenerationPlane, Split, tokenized
from rosettaserve.protocols.llm_http import SSE, SSE_HEADERS, Endpoint, streamed
from rosettaserve.protocols.tgi import convert
from rosettaserve.protocols.tgi.schema import TgiRequest, tgi_request
from rosettaserve.protocols.vllm import rest as vllm_rest
from rosettaserve.web.routing import HttpRequest, HttpResponse, json_response

FAMILY = "tgi"


def error_response(exc: ServingError) -> HttpResponse:
    return json_response(convert.error_doc(exc), exc.http_status, exc.headers)


def stream_error(exc: ServingError, first: bytes) -> bytes:
    return convert.sse(convert.error_doc(exc))


async def run(
    plane: GenerationPlane,
    doc: dict[str, Any],
    split: Split | None,
    stream: bool | None,
    as_list: bool,
) -> HttpResponse:
    mv, gen = await plane.loaded(Fields(doc).string("model") or "")
    tgi = tgi_request(doc, gen.info.max_stop_sequences, stream)
    await _truncate(gen, tgi)
    prefix = (tgi.generate.prompt or "") if tgi.return_full_text else ""
    generation = await plane.generate(FAMILY, mv, gen, tgi.generate, split)
    prompt = _prefill(gen, tgi) if tgi.decoder_input_details else []  # (ids the plane made)
    if tgi.generate.stream:
        framer = TgiFramer(tgi, prefix, gen.info.special_ids)
        return streamed(framer, generation, SSE, SSE_HEADERS)
    (done,) = await generation.collect()
    doc = convert.generate_response(tgi, done, prefix, prompt, gen.info.special_ids)
    headers = {"x-prompt-tokens": str(done.usage.prompt_tokens if done.usage else 0)}
    headers["x-generated-tokens"] = str(len(done.token_ids))
    return json_response([doc] if as_list else doc, headers=headers)


async def generate(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    doc = json_object(req.body)
    if "inputs" not in doc and "prompt" in doc:
        return await vllm_rest.generate(plane, doc, split)
    if "inputs" not in doc:
        raise InvalidInput(
            "`inputs` or `prompt` must be necessary: `inputs` for TGI, `prompt` for vLLM"
        )
    return await run(plane, doc, split, False, as_list=False)


async def generate_stream(
    plane: GenerationPlane, req: HttpRequest, split: Split | None
) -> HttpResponse:
    return await run(plane, json_object(req.body), split, True, as_list=False)


async def compat(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    return await run(plane, json_object(req.body), split, None, as_list=True)


async def info(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    _, gen = plane.find()
    return json_response(convert.info(gen.info))


async def health(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    try:
        plane.find()
    except ServingError:
        return json_response({"error": "unhealthy", "error_type": "healthcheck"}, 503)
    return HttpResponse(200, b"")


ENDPOINTS = [
    Endpoint("POST", "/generate", generate, "inputs"),  # vLLM's body: its family's "prompt"
    Endpoint("POST", "/generate_stream", generate_stream, "inputs"),
    Endpoint("POST", "/", compat, "inputs"),
    Endpoint("GET", "/info", info),
    Endpoint("GET", "/health", health),
]


async def _truncate(gen: TextGenerator, tgi: TgiRequest) -> None:
    """Only the prompt's last ``truncate`` tokens: any text fits, so it is tokenized whole
    (off the event loop when long)."""
    if tgi.truncate is None:
        return
    ids = await tokenized(gen, tgi.generate.prompt or "")
    if len(ids) > tgi.truncate:
        tgi.generate.prompt_token_ids = ids[-tgi.truncate :]


def _prefill(gen: TextGenerator, tgi: TgiRequest) -> list[tuple[int, str]]:
    ids = tgi.generate.prompt_token_ids or gen.tokenize(tgi.generate.prompt or "")
    return [(i, gen.decode([i])) for i in ids]


class TgiFramer:
    """StreamResponse events, one per token; the last carries the whole text and details."""

    def __init__(self, tgi: TgiRequest, prefix: str, specials: frozenset[int]) -> None:
        self.tgi, self.specials = tgi, specials
        self.text, self.index = prefix, 0

    def head(self) -> bytes:
        return b""

    def seen(self, delta: GenerateDelta) -> None:
        self.index += 1
        self.text += delta.text

    def chunk(self, delta: GenerateDelta) -> bytes:
        self.seen(delta)
        full = self.text if delta.finish_reason is not None else None
        return convert.stream_event(self.tgi, self.index, delta, full, self.specials)

    def tail(self) -> bytes:
        return b""

    def error(self, exc: ServingError) -> bytes:
        return stream_error(exc, b"")
