"""Tool calls read from a model's text, shared by every LLM family that speaks of tools.

``PARSERS`` holds the parsers by vLLM's ``--tool-call-parser`` names (model.yaml's
``parameters.tool_parser``); ``extract`` reads a whole answer, ``ToolStream`` a streamed one,
and the two always agree (base.py says why).
"""

from __future__ import annotations

import random
import string

from rosettaserve.protocols.tools.base import (
    CallDelta,
    Extracted,
    Parsed,
    PartialCall,
    ToolParser,
    ToolStream,
    extract,
)
from rosettaserve.protocols.tools.parsers import hermes, llama3_json, mistral, named, required
from rosettaserve.protocols.tools.pythonic import pythonic


def mistral_call_id() -> str:
    """Mistral's templates take back only ids of nine letters and digits (vLLM's)."""
    return "".join(random.choices(string.ascii_letters + string.digits, k=9))


PARSERS: dict[str, ToolParser] = {
    p.name: p
    for p in (
        ToolParser("hermes", hermes),
        ToolParser("llama3_json", llama3_json),
        ToolParser("llama4_json", llama3_json),
        ToolParser("mistral", mistral, mistral_call_id),
        ToolParser("pythonic", pythonic),
    )
}
# the output of a constrained tool choice (protocols/tools/choice.py): plain JSON, no tokens
REQUIRED = ToolParser("required", required)


def named_parser(name: str) -> ToolParser:
    return ToolParser("named", named(name))


__all__ = [
    "PARSERS",
    "REQUIRED",
    "CallDelta",
    "Extracted",
    "Parsed",
    "PartialCall",
    "ToolParser",
    "ToolStream",
    "extract",
    "named_parser",
]
