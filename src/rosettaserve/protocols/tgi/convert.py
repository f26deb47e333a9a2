"""GenerateDelta / Completion -> TGI's GenerateResponse, StreamResponse, /info, errors."""

from __future__ import annotations

from typing import Any

import orjson

from rosettaserve import __version__
from rosettaserve.core.errors import ServingError
from rosettaserve.core.generate import Completion, GenerateDelta, GeneratorInfo, TokenLogprob
from rosettaserve.protocols.tgi.schema import TgiRequest


def sse(doc: Any) -> bytes:
    """TGI (axum) writes ``data:`` with no space after the colon."""
    return b"data:" + orjson.dumps(doc) + b"\n\n"


def token(token_id: int, text: str, logprob: float | None, special: bool) -> dict[str, Any]:
    return {"id": token_id, "text": text, "logprob": logprob, "special": special}


def top_tokens(lp: TokenLogprob | None, specials: frozenset[int]) -> list[dict[str, Any]]:
    if lp is None:
        return []
    return [token(a.token_id, a.token, a.logprob, a.token_id in specials) for a in lp.top]


def details(
    tgi: TgiRequest, c: Completion, prompt: list[tuple[int, str]], specials: frozenset[int]
) -> dict[str, Any]:
    logprobs: list[TokenLogprob | None] = list(c.logprobs) or [None] * len(c.token_ids)
    tokens = [
        token(t, text, lp.logprob if lp else None, special)
        for t, text, lp, special in zip(
            c.token_ids, c.token_texts, logprobs, c.special, strict=True
        )
    ]
    doc: dict[str, Any] = {
        "finish_reason": c.finish_reason.value if c.finish_reason else None,
        "generated_tokens": len(c.token_ids),
        "seed": c.seed if tgi.generate.sampling.temperature > 0 else None,
        "prefill": [{"id": i, "text": text, "logprob": None} for i, text in prompt],
        "tokens": tokens,
    }
    if tgi.top_n_tokens:
        doc["top_tokens"] = [top_tokens(lp, specials) for lp in logprobs]
    return doc


def generate_response(
    tgi: TgiRequest,
    c: Completion,
    prefix: str,
    prompt: list[tuple[int, str]],
    specials: frozenset[int],
) -> dict[str, Any]:
    doc: dict[str, Any] = {"generated_text": prefix + c.text}
    if tgi.details:
        doc["details"] = details(tgi, c, prompt, specials)
    return doc


def stream_event(
    tgi: TgiRequest,
    index: int,
    delta: GenerateDelta,
    full_text: str | None,
    specials: frozenset[int],
) -> bytes:
    lp = delta.logprobs[0] if delta.logprobs else None
    doc: dict[str, Any] = {
        "index": index,
        "token": token(
            delta.token_ids[0], delta.text, lp.logprob if lp else None, delta.special[0]
        ),
        "top_tokens": top_tokens(lp, specials) if tgi.top_n_tokens else None,
        "generated_text": full_text,
        "details": None,
    }
    if full_text is not None and tgi.details:
        doc["details"] = {
            "finish_reason": delta.finish_reason.value if delta.finish_reason else None,
            "generated_tokens": index,
            "seed": delta.seed if tgi.generate.sampling.temperature > 0 else None,
            "input_length": delta.usage.prompt_tokens if delta.usage else None,
        }
    return sse(doc)


ERROR_TYPES = {429: "overloaded", 503: "unhealthy"}


def error_doc(exc: ServingError) -> dict[str, str]:
    status = exc.http_status
    kind = ERROR_TYPES.get(status, "generation" if status >= 500 else "validation")
    return {"error": exc.message, "error_type": kind}


def info(gen: GeneratorInfo) -> dict[str, Any]:
    return {
        "model_id": gen.model_id,
        "model_sha": None,
        "model_dtype": gen.dtype,
        "model_device_type": gen.device,
        "model_pipeline_tag": "text-generation",
        "max_concurrent_requests": gen.max_num_seqs + gen.max_waiting,
        "max_best_of": 1,
        "max_stop_sequences": gen.max_stop_sequences,
        "max_input_tokens": gen.max_model_len - 1,
        "max_input_length": gen.max_model_len - 1,
        "max_total_tokens": gen.max_model_len,
        "max_batch_size": gen.max_num_seqs,
        "max_client_batch_size": 1,
        "validation_workers": 1,
        "router": "rosettaserve",
        "version": __version__,
        "sha": None,
        "docker_label": None,
    }
