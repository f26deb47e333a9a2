"""vLLM's chat template fields of a chat request, built as vLLM builds them.

- ``add_generation_prompt`` (true), ``continue_final_message`` (false), ``documents`` and
  ``chat_template_kwargs`` become the variables the template is rendered with (the request's
  own fields last, as vLLM merges them: ``chat_template_kwargs`` cannot change the first
  three). Keys that are arguments of the template's call rather than variables of the template
  (the messages, the tools, tokenizing, a template) are refused.
- ``chat_template``, a template of the request's own: refused (vLLM's words) unless the server
  trusts request templates (``--trust-request-chat-template``, vLLM's flag); then transformers
  renders it in Jinja's immutable sandbox. ``chat_template_kwargs.chat_template`` is the same.
"""

from __future__ import annotations

from typing import Any

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import ChatTemplate, Fields

UNTRUSTED = (
    "Chat template is passed with request, but --trust-request-chat-template is not set. "
    "Refused request with untrusted chat template."
)
# apply_chat_template's own arguments, and the variables it sets itself: not the request's
CALL_ARGUMENTS = frozenset(
    {
        "conversation",
        "messages",
        "tools",
        "tokenize",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    }
)


def chat_template(f: Fields, trusted: bool) -> ChatTemplate:
    """The request's template variables, and its own template when ``trusted``."""
    given = f.object("chat_template_kwargs")
    kwargs = dict(given.doc)
    for key in sorted(kwargs):
        if key in CALL_ARGUMENTS:
            raise InvalidInput(
                f"'chat_template_kwargs.{key}' may not be set: it is an argument of the "
                "template's call, not a variable of the template"
            )
    inner = given.string("chat_template")
    kwargs.pop("chat_template", None)
    template = f.string("chat_template")
    if (template is not None or inner is not None) and not trusted:
        raise InvalidInput(UNTRUSTED)
    template = template or inner or None  # "": the model's own, as in vLLM
    variables: dict[str, Any] = {
        **kwargs,
        "add_generation_prompt": f.boolean("add_generation_prompt", True),
        "continue_final_message": f.boolean("continue_final_message", False),
    }
    documents = _documents(f.doc.get("documents"))
    if documents is not None:
        variables["documents"] = documents
    if variables.get("add_generation_prompt") and variables.get("continue_final_message"):
        raise InvalidInput(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
        )
    return ChatTemplate(variables, template)


def _documents(value: Any) -> list[dict[str, Any]] | None:
    """vLLM's ``documents`` (for retrieval-augmented templates): a list of objects."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(d, dict) for d in value):
        raise InvalidInput("'documents' must be a list of objects")
    return value
