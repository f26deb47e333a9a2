"""The one sampling reader over each family's field table, and the one table of families that
the server, the PD instance and the scheduler read."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import Fields, SamplingParams, json_object
from rosettaserve.core.sampling_fields import REPETITION_PENALTY_MIN, SamplingTable, read_sampling
from rosettaserve.pd.http_client import PeerClient
from rosettaserve.pd.options import SchedulerOptions
from rosettaserve.pd.scheduler import Scheduler
from rosettaserve.protocols import families, pooling
from rosettaserve.protocols.mindie import rest as mindie
from rosettaserve.protocols.ollama import models as ollama_models
from rosettaserve.protocols.openai import schema as openai
from rosettaserve.protocols.tgi import schema as tgi
from rosettaserve.protocols.triton_generate import rest as triton
from rosettaserve.protocols.vllm import rest as vllm
from tests.sampling_readers import (
    READERS,
    assert_finite_distribution,
    assert_safe,
    distribution,
    numeric_keys,
)


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
        (openai.SAMPLING, {"min_p": 0.1}, "'min_p' is not supported"),
        (openai.SAMPLING, {"min_tokens": 3}, "'min_tokens' is not supported"),
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


def test_one_table_of_families_feeds_the_server_and_the_scheduler() -> None:
    names = [f.name for f in families.FAMILIES]
    assert names == [
        "openai", "tgi", "vllm", "triton", "mindie", "openai-responses", "anthropic", "ollama"
    ]  # fmt: skip
    posts = [
        (e.pattern, f.name) for f in families.FAMILIES for e in f.endpoints if e.method == "POST"
    ]
    assert [(p, f.name) for p, (f, _) in families.POSTS.items()] == posts
    assert ("/v1/chat/completions", "openai") in posts
    assert ("/infer_token", "mindie") in posts
    options = SchedulerOptions(("http://127.0.0.1:1",), ("http://127.0.0.1:2",))
    scheduled = [r.pattern for r in Scheduler(options, PeerClient()).routes() if r.method == "POST"]
    whole = [e.pattern for f in families.FAMILIES for e in f.whole if e.method == "POST"]
    # forwarded whole to one instance: what generates nothing, and embeddings and rerank
    assert whole == ["/v1/messages/count_tokens", "/api/show", *ollama_models.NOT_BUILT]
    pooled = [e.path for e in pooling.ENDPOINTS]
    assert scheduled == [p for p, _ in posts] + whole + pooled
    vllm_body = b'{"prompt": "hi"}'
    assert families.family_of(families.TGI, "/generate", vllm_body) is families.VLLM
    assert families.family_of(families.TGI, "/generate", b'{"inputs": "hi"}') is families.TGI
    assert families.VLLM.stream_content_type(b'{"text":[""]}\0') == "application/octet-stream"


def test_a_path_finds_its_endpoint_and_the_parameters_it_carries() -> None:
    """What the decode role serves a handed-over request with (no router of its own)."""
    found = families.endpoint_of("/v2/models/m/versions/2/generate_stream")
    assert found is not None
    family, endpoint, params = found
    assert family is families.TRITON_GENERATE
    assert endpoint.pattern.endswith("/generate_stream")
    assert params == {"model": "m", "version": "2"}
    found = families.endpoint_of("/v2/models/m/generate")
    assert found is not None
    assert found[2] == {"model": "m"}  # no version: none passed on
    assert families.endpoint_of("/v2/models/m/infer") is None


def test_the_table_names_each_endpoints_prompt_field() -> None:
    assert families.text_field("/v1/chat/completions", b"{}") == "messages"
    assert families.text_field("/v1/completions", b"{}") == "prompt"
    assert families.text_field("/generate", b'{"inputs": "x"}') == "inputs"
    assert families.text_field("/generate", b'{"prompt": "x"}') == "prompt"  # vLLM's body
    assert families.text_field("/v2/models/m/versions/2/generate_stream", b"{}") == "text_input"
    assert families.text_field("/infer_token", b"{}") == "inputs"
    assert families.text_field("/v2/models/m/infer", b"{}") == ""  # not an LLM family's


# -- extreme values: refused with the family's 400, or safe to sample with ------------------------

EXTREMES: list[Any] = [
    *(1e-300, 5e-324, 1e-45, 1e-39, 9.99e-6, 1e-5, 1e308, -1e308, -0.0, 0, -1, 0.5, 1, 100),
    *(2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**64, 10**30, 10**400, 1e30),
    *(float("nan"), float("inf"), float("-inf")),
]
SEEN = [1, 2]  # tokens the penalties count, as if in the prompt or the output
VOCAB = 16


def logit_rows() -> list[torch.Tensor]:
    rng = torch.Generator().manual_seed(3)
    rows = [torch.randn(VOCAB, generator=rng) * scale for scale in (1.0, 1e3)]
    spiked = torch.randn(VOCAB, generator=rng)
    spiked[0] = float("-inf")  # a token already excluded
    return [*rows, spiked]


@pytest.mark.parametrize("family", READERS)
def test_every_numeric_field_is_refused_or_safe_at_every_extreme(family: str) -> None:
    rows = logit_rows()
    accepted = 0
    for key in numeric_keys(family):
        for value in EXTREMES:
            try:
                params = READERS[family]({key: value})
            except InvalidInput:
                continue
            accepted += 1
            assert_safe(params)
            for row in rows:
                assert_finite_distribution(distribution(params, row, SEEN))
    assert accepted  # the extremes a field's range holds are read, not refused wholesale


WORST = {  # the extremes each field accepts, all at once
    "temperature": 1e-5,
    "top_p": 5e-324,
    "top_k": 2**63,
    "repetition_penalty": 5e-324,
    "presence_penalty": -2.0,
    "frequency_penalty": -2.0,
    "seed": 2**63 - 1,
    "do_sample": True,
}


@pytest.mark.parametrize("family", READERS)
@pytest.mark.parametrize("temperature", [5e-324, 1e-5, 2.0])
def test_the_worst_accepted_combination_samples_a_finite_distribution(
    family: str, temperature: float
) -> None:
    doc = {**WORST, "temperature": temperature}
    if family in ("vllm", "openai-chat", "openai-completions", "oip"):
        del doc["do_sample"]  # not theirs: vLLM's reader refuses unknown keys
    if family == "anthropic":
        doc["temperature"] = min(temperature, 1.0)  # Anthropic's range ends at 1
    params = READERS[family](doc)
    assert_safe(params)
    for row in logit_rows():
        assert_finite_distribution(distribution(params, row, SEEN))


@pytest.mark.parametrize("family", [f for f in READERS if "temperature" in numeric_keys(f)])
def test_a_temperature_below_1e_5_decodes_greedily_in_every_family(family: str) -> None:
    for tiny in (1e-300, 5e-324, 9.99e-6):
        sampled = {"temperature": tiny, "top_p": 0.5, "top_k": 3}
        for doc in (sampled, {**sampled, "do_sample": True}):
            if family in ("vllm", "openai-chat", "openai-completions", "oip"):
                doc.pop("do_sample", None)
            params = READERS[family](doc)
            assert (params.temperature, params.top_p, params.top_k) == (0.0, 1.0, 0), doc
    assert READERS[family]({"temperature": 1e-5}).temperature == 1e-5


def test_values_float32_cannot_hold_are_brought_into_its_range() -> None:
    p = read(openai.SAMPLING, {"repetition_penalty": 5e-324, "top_k": 2**40})
    assert (p.repetition_penalty, p.top_k) == (REPETITION_PENALTY_MIN, 0)
    assert read(openai.SAMPLING, {"repetition_penalty": 0.5}).repetition_penalty == 0.5


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (float("nan"), "'parameters.temperature' must be a finite number, got nan"),
        (float("inf"), "'parameters.temperature' must be a finite number, got inf"),
        (10**400, "'parameters.temperature' must be a finite number"),
    ],
)
def test_oip_parameters_refuse_nan_and_the_infinities(value: Any, message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        READERS["oip"]({"temperature": value})
    assert message in caught.value.message


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_an_integer_field_refuses_nan_and_the_infinities(value: float) -> None:
    with pytest.raises(InvalidInput, match=r"'parameters\.top_k' must be an integer"):
        READERS["oip"]({"top_k": value})


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity", b"1e309", b"-1e400"])
def test_json_bodies_refuse_non_finite_literals(literal: bytes) -> None:
    with pytest.raises(InvalidInput, match="malformed JSON"):
        json_object(b'{"model": "m", "prompt": "hi", "temperature": ' + literal + b"}")


def test_oip_reads_its_table_greedy_unless_a_temperature_is_set() -> None:
    p = READERS["oip"]({})
    assert (p.temperature, p.max_new_tokens, p.top_p, p.top_k) == (0.0, 64, 1.0, 0)
    p = READERS["oip"]({"max_new_tokens": 5, "temperature": 0.7, "seed": 3, "stop": "x"})
    assert (p.max_new_tokens, p.temperature, p.seed, p.stop) == (5, 0.7, 3, ("x",))
    assert READERS["oip"]({"max_tokens": 7, "max_new_tokens": 5}).max_new_tokens == 7


@pytest.mark.parametrize("family", ["openai-chat", "openai-completions", "vllm"])
@pytest.mark.parametrize("bias", [1e-300, 1e308, -1e308, 100])
def test_logit_bias_values_are_refused_where_the_family_has_the_field(
    family: str, bias: float
) -> None:
    with pytest.raises(InvalidInput, match="logit_bias"):
        READERS[family]({"logit_bias": {"5": bias}})
