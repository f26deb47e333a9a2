"""OpenAI chat and completions bodies (``protocols/openai/schema.py`` with vLLM's fields, the
chat template's in ``chat_templates.py``) and vLLM's simple API's (``protocols/vllm/rest.py``),
read as the routes read them, before any model is asked.

Properties: only the project's errors (4xx) escape reading a body; a chat request read never
carries a variable that would replace the template call's own arguments, a template of its own
only where the server trusts them, nor both ``add_generation_prompt`` and
``continue_final_message``; prompt logprobs are never asked of a stream.
"""

from __future__ import annotations

from rosettaserve.core.generate import Fields, json_object
from rosettaserve.protocols.openai import schema
from rosettaserve.protocols.openai.chat_templates import CALL_ARGUMENTS
from rosettaserve.protocols.vllm import rest as vllm
from tests.fuzz.targets.refusals import assert_a_refusal


def check(data: bytes) -> None:
    try:
        doc = json_object(data)
    except Exception as exc:
        assert_a_refusal(exc)
        return
    for trusted in (False, True):
        try:
            oa, _ = schema.chat_request(doc, 4, 8, trusted)
        except Exception as exc:
            assert_a_refusal(exc)
            continue
        chat = oa.chat
        assert chat is not None
        assert not CALL_ARGUMENTS & set(chat.variables), chat.variables
        assert trusted or chat.template is None, chat.template
        variables = chat.variables
        assert not (variables["add_generation_prompt"] and variables["continue_final_message"])
        assert oa.generate.sampling.prompt_logprobs is None or not oa.generate.stream
    try:
        schema.completion_request(doc, 4, 8)
    except Exception as exc:
        assert_a_refusal(exc)
    try:
        vllm.sampling(Fields(doc), 4, 8)
    except Exception as exc:
        assert_a_refusal(exc)
