"""What a request asks its output to match, whatever family or field asked it.

OpenAI's ``response_format``, vLLM's ``structured_outputs`` and ``guided_*``, TGI's ``grammar``,
Ollama's ``format`` and a tool choice that must produce a call all become one
``OutputConstraint``; the engine compiles it to a grammar and masks each step's tokens by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class ConstraintKind(Enum):
    JSON_SCHEMA = "json_schema"  # spec: the schema as JSON text
    JSON_OBJECT = "json_object"  # any JSON object (spec: "")
    REGEX = "regex"  # spec: the pattern
    CHOICE = "choice"  # spec: a JSON list of the strings allowed
    GRAMMAR = "grammar"  # spec: a grammar in GBNF (vLLM's ``grammar``)


@dataclass(frozen=True, slots=True)
class OutputConstraint:
    """The output must match ``spec`` read as ``kind``; equal constraints share one compiled
    grammar (the value is its cache key)."""

    kind: ConstraintKind
    spec: str
