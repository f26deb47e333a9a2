"""The LLM families added after OpenAI chat: Responses (``protocols/openai/responses_schema.py``),
Anthropic Messages (``protocols/anthropic/schema.py``) and Ollama's chat and generate
(``protocols/ollama/schema.py``) bodies, read as their routes read them, before any model is
asked (their tools and structured-output fields included).

Property: only the project's errors (4xx) escape reading a body.
"""

from __future__ import annotations

from rosettaserve.core.generate import json_object
from rosettaserve.protocols.anthropic import schema as anthropic
from rosettaserve.protocols.ollama import schema as ollama
from rosettaserve.protocols.openai import responses_schema
from tests.fuzz.targets.refusals import assert_a_refusal


def check(data: bytes) -> None:
    try:
        doc = json_object(data)
    except Exception as exc:
        assert_a_refusal(exc)
        return
    readers = (
        lambda: responses_schema.responses_request(doc, 8),
        lambda: anthropic.messages_request(doc, 8),
        lambda: anthropic.messages_request(doc, 8, counting=True),
        lambda: ollama.chat_request(doc, 8, 512),
        lambda: ollama.generate_request(doc, 8, 512, False),
        lambda: ollama.generate_request(doc, 8, 512, True),
    )
    for read in readers:
        try:
            read()
        except Exception as exc:
            assert_a_refusal(exc)
