"""TGI's ``{"inputs", "parameters", "stream"}`` -> GenerateRequest.

The ``parameters`` block is shared, with small differences, by MindIE's native API and its
Triton generate flavour; their sampling tables are variations of ``SAMPLING`` here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import Fields, GenerateRequest
from rosettaserve.core.sampling_fields import (
    PENALTIES,
    Field,
    Refused,
    SamplingTable,
    read_sampling,
)
from rosettaserve.core.structured_output import TGI_FORMS, read_constraint

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


# TGI's rule: sample when ``do_sample`` is set or any warper is; otherwise greedy.
SAMPLING = SamplingTable(
    fields=(
        Field("max_new_tokens", ("max_new_tokens",), "int", 1),
        Field("temperature", ("temperature",), "number", 0.0, 100.0, lo_open=True),
        Field("top_k", ("top_k",), "int", 1),
        Field("top_p", ("top_p",), "number", 0.0, 1.0, lo_open=True),
        *PENALTIES,
        Field("stop", ("stop",), "strings"),
    ),
    refused=(
        Refused("typical_p", "number", 1.0, 0.0, 1.0, lo_open=True),
        Refused("watermark", "bool", False),
    ),
    default_max_new_tokens=DEFAULT_MAX_NEW_TOKENS,
    sample_rule="do_sample",
    fixed={"include_stop_str_in_output": True},  # TGI's generated text keeps the stop sequence
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
    streaming = f.boolean("stream", False) if stream is None else stream
    decoder_input_details = p.boolean("decoder_input_details", False)
    if streaming and decoder_input_details:
        raise InvalidInput("'decoder_input_details' is not supported when streaming")
    params = read_sampling(p, SAMPLING, max_stop)
    top_n = p.integer("top_n_tokens", 0, 0, MAX_TOP_N_TOKENS) or 0
    params.logprobs, params.top_logprobs = True, top_n
    params.constraint = read_constraint(p.doc, TGI_FORMS, "parameters")
    request = GenerateRequest(prompt=inputs_text(doc), sampling=params, stream=streaming)
    return TgiRequest(
        generate=request,
        details=p.boolean("details", False) or decoder_input_details,
        decoder_input_details=decoder_input_details,
        return_full_text=p.boolean("return_full_text", False),
        top_n_tokens=top_n,
        truncate=p.integer("truncate", None, 1),
    )
