"""TGI's ``{"inputs", "parameters", "stream"}`` -> GenerateRequest.

The ``parameters`` block is shared, with small differences, by MindIE's native API and its
Triton generate flavour; those families reuse ``sampling`` from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import SEED_MAX, Fields, GenerateRequest, SamplingParams

DEFAULT_MAX_NEW_TOKENS = 100  # TGI's router default
MAX_TOP_N_TOKENS = 20


@dataclass
class TgiRequest:
    generate: GenerateRequest
    details: bool
    decoder_input_details: bool
    return_full_text: bool
    top_n_tokens: int
    truncate: int | None


def sampling(p: Fields, default_max: int, max_stop: int) -> SamplingParams:
    """TGI's rule: sample when ``do_sample`` is set or any warper is; otherwise greedy."""
    temperature = p.number("temperature", None, 0.0, 100.0, lo_open=True)
    top_k = p.integer("top_k", None, 1)
    top_p = p.number("top_p", None, 0.0, 1.0, lo_open=True)
    typical_p = p.number("typical_p", None, 0.0, 1.0, lo_open=True)
    if typical_p is not None and typical_p < 1.0:
        raise InvalidInput(f"'{p._name('typical_p')}' is not supported by this server")
    if p.boolean("watermark", False):
        raise InvalidInput(f"'{p._name('watermark')}' is not supported by this server")
    warped = (temperature not in (None, 1.0)) or top_k is not None or (top_p or 1.0) < 1.0
    sample = p.boolean("do_sample", False) or warped
    return SamplingParams(
        max_new_tokens=p.integer("max_new_tokens", None, 1),
        default_max_new_tokens=default_max,
        temperature=(temperature or 1.0) if sample else 0.0,
        top_p=top_p or 1.0,
        top_k=top_k or 0,
        seed=p.integer("seed", None, 0, SEED_MAX),
        repetition_penalty=p.number("repetition_penalty", 1.0, 0.0, 100.0, lo_open=True) or 1.0,
        presence_penalty=p.number("presence_penalty", 0.0, -2.0, 2.0) or 0.0,
        frequency_penalty=p.number("frequency_penalty", 0.0, -2.0, 2.0) or 0.0,
        stop=p.strings("stop", max_stop),
        include_stop_str_in_output=True,  # TGI's generated text keeps the stop sequence
    )


def inputs_text(doc: dict[str, Any], key: str = "inputs") -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"'{key}' must be a non-empty string")
    return value


def tgi_request(doc: dict[str, Any], max_stop: int, stream: bool | None = None) -> TgiRequest:
    """``stream`` None: the body's ``stream`` decides (the ``/`` route)."""
    f = Fields(doc)
    p = f.object("parameters")
    if (p.integer("best_of", None, 1) or 1) > 1:
        raise InvalidInput("'parameters.best_of' above 1 is not supported by this server")
    if p.doc.get("grammar") is not None:
        raise InvalidInput("'parameters.grammar' is not supported by this server")
    streaming = f.boolean("stream", False) if stream is None else stream
    decoder_input_details = p.boolean("decoder_input_details", False)
    if streaming and decoder_input_details:
        raise InvalidInput("'decoder_input_details' is not supported when streaming")
    params = sampling(p, DEFAULT_MAX_NEW_TOKENS, max_stop)
    top_n = p.integer("top_n_tokens", 0, 0, MAX_TOP_N_TOKENS) or 0
    params.logprobs, params.top_logprobs = True, top_n
    request = GenerateRequest(prompt=inputs_text(doc), sampling=params, stream=streaming)
    return TgiRequest(
        generate=request,
        details=p.boolean("details", False) or decoder_input_details,
        decoder_input_details=decoder_input_details,
        return_full_text=p.boolean("return_full_text", False),
        top_n_tokens=top_n,
        truncate=p.integer("truncate", None, 1),
    )
