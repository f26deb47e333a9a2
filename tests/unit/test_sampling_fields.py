"""The one sampling reader over each family's field table, and the one table of families that
the server, the PD instance and the scheduler read."""

from __future__ import annotations

from typing import Any

import pytest

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import Fields, SamplingParams
from rosettaserve.core.sampling_fields import SamplingTable, read_sampling
from rosettaserve.pd import families as pd_families
from rosettaserve.protocols import families
from rosettaserve.protocols.mindie import rest as mindie
from rosettaserve.protocols.openai import schema as openai
from rosettaserve.protocols.tgi import schema as tgi
from rosettaserve.protocols.triton_generate import rest as triton
from rosettaserve.protocols.vllm import rest as vllm


def read(table: SamplingTable, doc: dict[str, Any], where: str = "") -> SamplingParams:
    return read_sampling(Fields(doc, where), table, max_stop=4)


def test_openai_defaults_and_max_completion_tokens_first() -> None:
    chat = read(openai.SAMPLING, {})
    assert (chat.max_new_tokens, chat.temperature, chat.top_p, chat.top_k) == (None, 1.0, 1.0, 0)
    assert read(openai.COMPLETIONS_SAMPLING, {}).max_new_tokens == 16
    both = read(openai.SAMPLING, {"max_completion_tokens": 5, "max_tokens": 9})
    assert both.max_new_tokens == 5
    assert read(openai.SAMPLING, {"max_tokens": 9, "top_k": -1}).top_k == 0  # -1: off
    assert read(openai.SAMPLING, {"temperature": 0}).temperature == 0.0
    stops = read(openai.SAMPLING, {"stop": "x", "stop_token_ids": [2], "ignore_eos": True})
    assert (stops.stop, stops.stop_token_ids, stops.ignore_eos) == (("x",), (2,), True)


def test_tgi_samples_only_when_asked_or_warped() -> None:
    greedy = read(tgi.SAMPLING, {})
    assert greedy.temperature == 0.0
    assert greedy.default_max_new_tokens == 100
    assert greedy.include_stop_str_in_output
    assert read(tgi.SAMPLING, {"do_sample": True}).temperature == 1.0
    assert read(tgi.SAMPLING, {"top_p": 0.5}).temperature == 1.0
    assert read(tgi.SAMPLING, {"temperature": 0.7}).temperature == 0.7
    assert read(tgi.SAMPLING, {"temperature": 1.0}).temperature == 0.0  # 1.0 warps nothing


def test_vllm_treats_a_tiny_temperature_as_greedy() -> None:
    assert read(vllm.SAMPLING, {"temperature": 1e-6}).temperature == 0.0
    assert read(vllm.SAMPLING, {"temperature": 0.5}).temperature == 0.5
    assert read(vllm.SAMPLING, {}).max_new_tokens == 16
    assert read(vllm.SAMPLING, {"min_p": 0.0, "min_tokens": 0}).max_new_tokens == 16


def test_triton_reads_the_tensorrt_llm_names_and_mindie_its_defaults() -> None:
    p = read(triton.SAMPLING, {"max_tokens": 7, "stop_words": ["x"], "random_seed": 3})
    assert (p.max_new_tokens, p.stop, p.seed) == (7, ("x",), 3)
    assert read(triton.SAMPLING, {"max_tokens": 7, "max_new_tokens": 2}).max_new_tokens == 2
    assert not read(triton.SAMPLING, {}).include_stop_str_in_output
    assert read(mindie.SAMPLING, {}).default_max_new_tokens == 20


@pytest.mark.parametrize(
    ("table", "doc", "message"),
    [
        (openai.SAMPLING, {"temperature": 3}, "'temperature' must be in [0.0, 2.0], got 3"),
        (openai.SAMPLING, {"max_tokens": 0}, "'max_tokens' must be >= 1, got 0"),
        (openai.SAMPLING, {"stop": ["a"] * 5}, "'stop' has 5 items; at most 4"),
        (tgi.SAMPLING, {"top_p": 0}, "'parameters.top_p' must be in (0.0, 1.0], got 0"),
        (tgi.SAMPLING, {"typical_p": 0.5}, "'parameters.typical_p' is not supported"),
        (tgi.SAMPLING, {"watermark": True}, "'parameters.watermark' is not supported"),
        (vllm.SAMPLING, {"min_p": 0.1}, "'min_p' is not supported"),
        (vllm.SAMPLING, {"seed": "1"}, "'seed' must be an integer"),
    ],
)
def test_a_bad_field_is_named_in_the_error(
    table: SamplingTable, doc: dict[str, Any], message: str
) -> None:
    where = "parameters" if table is tgi.SAMPLING else ""
    with pytest.raises(InvalidInput) as caught:
        read(table, doc, where)
    assert message in caught.value.message


def test_one_table_of_families_feeds_the_scheduler() -> None:
    names = [f.name for f in families.FAMILIES]
    assert names == ["openai", "tgi", "vllm", "triton", "mindie"]
    posts = [
        (e.pattern, f.name) for f in families.FAMILIES for e in f.endpoints if e.method == "POST"
    ]
    assert [(p, f.name) for p, f in pd_families.ROUTES] == posts
    assert ("/v1/chat/completions", "openai") in posts
    assert ("/infer_token", "mindie") in posts
    vllm_body = b'{"prompt": "hi"}'
    assert pd_families.family_of("/generate", families.TGI, vllm_body) is families.VLLM
    assert pd_families.family_of("/generate", families.TGI, b'{"inputs": "hi"}') is families.TGI
    assert families.VLLM.stream_content_type(b'{"text":[""]}\0') == "application/octet-stream"


def test_the_table_names_each_endpoints_prompt_field() -> None:
    assert families.text_field("/v1/chat/completions", b"{}") == "messages"
    assert families.text_field("/v1/completions", b"{}") == "prompt"
    assert families.text_field("/generate", b'{"inputs": "x"}') == "inputs"
    assert families.text_field("/generate", b'{"prompt": "x"}') == "prompt"  # vLLM's body
    assert families.text_field("/v2/models/m/versions/2/generate_stream", b"{}") == "text_input"
    assert families.text_field("/infer_token", b"{}") == "inputs"
    assert families.text_field("/v2/models/m/infer", b"{}") == ""  # not an LLM family's
