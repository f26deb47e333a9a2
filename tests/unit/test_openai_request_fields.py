"""Every request field of OpenAI's API and of vLLM's servers is read (built as vLLM builds it)
or refused with a 400 when it would change the answer: none is accepted and then ignored."""

from __future__ import annotations

from typing import Any

import pytest

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import Fields
from rosettaserve.protocols.openai import schema
from rosettaserve.protocols.openai.chat_templates import CALL_ARGUMENTS, UNTRUSTED
from rosettaserve.protocols.vllm import rest as vllm

MESSAGES = [{"role": "user", "content": "hi"}]


def chat(trusted: bool = False, **fields: Any) -> schema.OpenAIRequest:
    doc = {"model": "m", "messages": MESSAGES, **fields}
    return schema.chat_request(doc, 4, 4, trusted)[0]


def completion(**fields: Any) -> schema.OpenAIRequest:
    return schema.completion_request({"model": "m", "prompt": "hi", **fields}, 4, 4)


def refused(call: Any, *args: Any, **fields: Any) -> str:
    with pytest.raises(InvalidInput) as caught:
        call(*args, **fields)
    return caught.value.message


# -- fields not built ----------------------------------------------------------------------------

NOT_BUILT_VALUES = {
    "logit_bias": {"1": 5},
    "suffix": "end",
    "reasoning_effort": "high",
    "modalities": ["text", "audio"],
    "audio": {"voice": "alloy", "format": "wav"},
    "prediction": {"type": "content", "content": "x"},
    "web_search_options": {"search_context_size": "low"},
    "use_beam_search": True,
    "structural_tag": "{}",
    "allowed_token_ids": [1, 2],
    "bad_words": ["no"],
    "logits_processors": ["x"],
    "truncate_prompt_tokens": 4,
    "mm_processor_kwargs": {"x": 1},
    "cache_salt": "tenant",
    "return_tokens_as_token_ids": True,
    "return_token_ids": True,
    "kv_transfer_params": {"do_remote_decode": True},
    "vllm_xargs": {"x": 1},
}


def test_the_table_lists_each_field_tested() -> None:
    assert set(NOT_BUILT_VALUES) == set(schema.NOT_BUILT)


@pytest.mark.parametrize(("key", "value"), list(NOT_BUILT_VALUES.items()))
def test_a_field_not_built_is_refused_in_chat_and_completions(key: str, value: Any) -> None:
    for call in (chat, completion):
        assert refused(call, **{key: value}) == f"'{key}' is not supported by this server"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("tools", [{"type": "function", "function": {"name": "f"}}]),
        ("functions", [{"name": "f"}]),
        ("tool_choice", "required"),
        ("function_call", {"name": "f"}),
    ],
)
def test_chat_tools_are_refused_in_completions(key: str, value: Any) -> None:
    assert refused(completion, **{key: value}) == f"'{key}' is not supported by this server"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("tools", []),
        ("tool_choice", "none"),
        ("tool_choice", "auto"),
        ("response_format", {"type": "text"}),
        ("modalities", ["text"]),
        ("use_beam_search", False),
        ("priority", 0),
        ("logit_bias", {}),
        ("guided_json", None),
        # accepted: they change nothing of the answer
        ("user", "u-1"),
        ("store", True),
        ("metadata", {"k": "v"}),
        ("service_tier", "auto"),
        ("parallel_tool_calls", True),
        ("length_penalty", 2.0),
        ("request_id", "r-1"),
    ],
)
def test_neutral_values_and_fields_that_change_nothing_are_accepted(key: str, value: Any) -> None:
    chat(**{key: value})
    completion(**{key: value})


def test_priority_is_read_as_vllm_reads_it() -> None:
    assert chat().generate.priority is None
    assert chat(priority=-3).generate.priority == -3
    assert completion(priority=7).generate.priority == 7


@pytest.mark.parametrize("value", ["high", 1.5, True, 2**31, -(2**31) - 1, [1]])
def test_a_hostile_priority_is_refused(value: Any) -> None:
    for call in (chat, completion):
        assert "'priority' must be" in refused(call, priority=value)


def test_chat_echo_and_best_of_are_built_or_refused() -> None:
    assert refused(chat, echo=True) == "'echo' is not supported by this server"
    chat(echo=False)
    assert "best_of" in refused(chat, n=1, best_of=2)
    chat(n=2, best_of=2)


def test_add_special_tokens_is_read_with_vllms_defaults() -> None:
    assert chat().generate.add_special_tokens is False
    assert chat(add_special_tokens=True).generate.add_special_tokens is True
    assert completion().generate.add_special_tokens is True
    assert completion(add_special_tokens=False).generate.add_special_tokens is False


def test_spaces_between_special_tokens_false_is_refused_only_where_it_would_matter() -> None:
    chat(spaces_between_special_tokens=False)  # special tokens skipped: no effect
    completion(spaces_between_special_tokens=True, skip_special_tokens=False)
    for call in (chat, completion):
        message = refused(call, spaces_between_special_tokens=False, skip_special_tokens=False)
        assert "'spaces_between_special_tokens': false" in message


# -- chat templates -----------------------------------------------------------------------------


def test_chat_template_variables_are_built_as_vllm_builds_them() -> None:
    assert chat().chat is not None
    assert chat().chat.variables == {"add_generation_prompt": True, "continue_final_message": False}
    built = chat(
        add_generation_prompt=False,
        continue_final_message=True,
        documents=[{"title": "t", "text": "x"}],
        chat_template_kwargs={"enable_thinking": False, "custom": [1, {"a": "b"}]},
    ).chat
    assert built is not None
    assert built.variables == {
        "add_generation_prompt": False,
        "continue_final_message": True,
        "documents": [{"title": "t", "text": "x"}],
        "enable_thinking": False,
        "custom": [1, {"a": "b"}],
    }
    assert built.template is None
    # the request's own fields win over chat_template_kwargs, as vLLM merges them
    fields_win = chat(
        chat_template_kwargs={"add_generation_prompt": False, "continue_final_message": True}
    ).chat
    assert fields_win is not None
    assert fields_win.variables == {"add_generation_prompt": True, "continue_final_message": False}


@pytest.mark.parametrize("key", sorted(CALL_ARGUMENTS))
def test_chat_template_kwargs_may_not_set_the_calls_own_arguments(key: str) -> None:
    message = refused(chat, chat_template_kwargs={key: "x"})
    assert message.startswith(f"'chat_template_kwargs.{key}' may not be set")


@pytest.mark.parametrize(
    "fields",
    [
        {"chat_template_kwargs": [1]},
        {"documents": "text"},
        {"documents": [1]},
        {"add_generation_prompt": "yes"},
        {"add_generation_prompt": True, "continue_final_message": True},
        {"chat_template": 5},
    ],
)
def test_malformed_chat_template_fields_are_refused(fields: dict[str, Any]) -> None:
    refused(chat, True, **fields)


def test_a_requests_own_template_is_refused_unless_trusted_as_vllm_does() -> None:
    template = "{{ messages[0]['content'] }}"
    assert refused(chat, chat_template=template) == UNTRUSTED
    assert refused(chat, chat_template_kwargs={"chat_template": template}) == UNTRUSTED
    assert refused(chat, chat_template="") == UNTRUSTED  # sent is sent
    for fields in (
        {"chat_template": template},
        {"chat_template_kwargs": {"chat_template": template}},
    ):
        trusted = chat(True, **fields).chat
        assert trusted is not None
        assert trusted.template == template
        assert "chat_template" not in trusted.variables
    model_default = chat(True, chat_template="").chat
    assert model_default is not None
    assert model_default.template is None


# -- prompt logprobs ----------------------------------------------------------------------------


def test_prompt_logprobs_are_read_in_chat_completions_and_vllms_simple_api() -> None:
    assert chat().generate.sampling.prompt_logprobs is None
    assert chat(prompt_logprobs=3).generate.sampling.prompt_logprobs == 3
    assert completion(prompt_logprobs=0).generate.sampling.prompt_logprobs == 0
    params, _ = vllm.sampling(Fields({"prompt": "hi", "prompt_logprobs": 2}), 4, 4)
    assert params.prompt_logprobs == 2
    for bad in (-1, 21, "2", 1.5):
        refused(chat, prompt_logprobs=bad)
        refused(completion, prompt_logprobs=bad)
        refused(vllm.sampling, Fields({"prompt": "hi", "prompt_logprobs": bad}), 4, 4)


def test_prompt_logprobs_are_not_available_when_streaming_as_in_vllm() -> None:
    for call in (chat, completion):
        message = refused(call, prompt_logprobs=1, stream=True)
        assert message == "'prompt_logprobs' are not available when 'stream' is true"


def test_vllms_simple_api_refuses_unspaced_special_tokens_where_they_matter() -> None:
    vllm.sampling(Fields({"prompt": "hi", "spaces_between_special_tokens": False}), 4, 4)
    doc = {"prompt": "hi", "spaces_between_special_tokens": False, "skip_special_tokens": False}
    refused(vllm.sampling, Fields(doc), 4, 4)
