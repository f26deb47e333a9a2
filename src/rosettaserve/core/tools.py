"""Tools a request offers the model, how it must choose among them, and the calls it made:
the same for every family that speaks of tools (OpenAI chat and Responses, Anthropic
Messages, Ollama)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function the model may call: its name, what it does, its arguments' JSON schema."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)


class ChoiceMode(Enum):
    NONE = "none"  # no call: the tools are not offered
    AUTO = "auto"  # the model decides; its text is read by the model's tool parser
    REQUIRED = "required"  # at least one call (constrained decoding)
    NAMED = "named"  # a call of one named function (constrained decoding)


@dataclass(frozen=True, slots=True)
class ToolChoice:
    mode: ChoiceMode = ChoiceMode.AUTO
    name: str = ""  # the function of a NAMED choice
    parallel: bool = True  # several calls in one answer (OpenAI's parallel_tool_calls)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the model made: ``arguments`` is a JSON object's text, as the families send it."""

    id: str
    name: str
    arguments: str
