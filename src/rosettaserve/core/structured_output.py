"""What a request asks its output to match, whatever family or field asked it.

OpenAI's ``response_format``, vLLM's ``structured_outputs`` and ``guided_*``, TGI's ``grammar``,
Ollama's ``format`` and a tool choice that must produce a call all become one
``OutputConstraint``; the engine compiles it to a grammar and masks each step's tokens by it.

``read_constraint`` is the one reader: a family lists the wire keys it takes (``Form`` rows,
each naming the reader of its value), and the reader refuses two of them at once, as vLLM
does. ``prepare_constraint`` compiles a constraint for a generator before the request is
queued (off the event loop unless the generator has it already), so a schema, pattern or
grammar that cannot compile is a 400 naming the problem from every family; the generation
plane calls it for every request, and protocol code that sets a constraint itself (a tool
choice) gets the same checks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol, runtime_checkable

import orjson

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.executor import run_request_work


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


def json_schema(schema: Any, name: str) -> OutputConstraint:
    """A JSON schema (an object, or its JSON text) as a constraint: compact JSON text, in its
    own key order (properties are written in it)."""
    if isinstance(schema, str):
        try:
            schema = orjson.loads(schema)
        except orjson.JSONDecodeError as exc:
            raise InvalidInput(f"'{name}' is not valid JSON: {exc}") from None
    if not isinstance(schema, dict | bool):
        raise InvalidInput(f"'{name}' must be a JSON schema (an object), got {schema!r:.100}")
    return OutputConstraint(ConstraintKind.JSON_SCHEMA, orjson.dumps(schema).decode())


def json_object() -> OutputConstraint:
    return OutputConstraint(ConstraintKind.JSON_OBJECT, "")


def _text(value: Any, name: str, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"'{name}' must be a non-empty string ({what}), got {value!r:.100}")
    return value


def regex(value: Any, name: str) -> OutputConstraint:
    return OutputConstraint(ConstraintKind.REGEX, _text(value, name, "a regular expression"))


def grammar(value: Any, name: str) -> OutputConstraint:
    return OutputConstraint(ConstraintKind.GRAMMAR, _text(value, name, "a grammar in GBNF"))


def choice(value: Any, name: str) -> OutputConstraint:
    if not isinstance(value, list) or not value or not all(isinstance(c, str) and c for c in value):
        raise InvalidInput(f"'{name}' must be a non-empty list of non-empty strings")
    return OutputConstraint(ConstraintKind.CHOICE, orjson.dumps(value).decode())


def _object(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput(f"'{name}' must be an object, got {value!r:.100}")
    return value


def response_format(value: Any, name: str) -> OutputConstraint | None:
    """OpenAI's ``response_format``: ``text`` (no constraint), ``json_object``, or
    ``json_schema`` with ``json_schema.schema`` (``strict`` accepted: the output always
    follows the schema here)."""
    doc = _object(value, name)
    kind = doc.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return json_object()
    if kind == "json_schema":
        inner = _object(doc.get("json_schema"), f"{name}.json_schema")
        strict = inner.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise InvalidInput(f"'{name}.json_schema.strict' must be a boolean")
        if "schema" not in inner:
            raise InvalidInput(f"'{name}.json_schema.schema' is required (the JSON schema)")
        return json_schema(inner["schema"], f"{name}.json_schema.schema")
    raise InvalidInput(
        f"'{name}.type' must be one of text, json_object, json_schema, got {kind!r:.100}"
    )


# vLLM's ``structured_outputs`` fields: each a constraint of its own
_STRUCTURED: dict[str, Callable[[Any, str], OutputConstraint | None]] = {
    "json": json_schema,
    "regex": regex,
    "choice": choice,
    "grammar": grammar,
    "json_object": lambda v, n: json_object() if _flag(v, n) else None,
}
# its options, accepted only at their neutral value (anything else changes the output)
_STRUCTURED_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "disable_fallback": (False, True),  # which backend: changes nothing here
    "disable_any_whitespace": (False, True),  # JSON is always written without extra spaces
    "disable_additional_properties": (False,),
    "whitespace_pattern": (None,),
    "structural_tag": (None,),
}


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"'{name}' must be a boolean, got {value!r:.100}")
    return value


def structured_outputs(value: Any, name: str) -> OutputConstraint | None:
    """vLLM's ``structured_outputs``: exactly one of json, regex, choice, grammar,
    json_object."""
    doc = _object(value, name)
    found = [
        (k, r(doc[k], f"{name}.{k}")) for k, r in _STRUCTURED.items() if doc.get(k) is not None
    ]
    for key in doc.keys() - _STRUCTURED.keys():
        if key not in _STRUCTURED_NEUTRAL:
            raise InvalidInput(f"'{name}.{key}' is not a field of structured outputs")
        if doc[key] not in _STRUCTURED_NEUTRAL[key]:
            raise InvalidInput(f"'{name}.{key}' is not supported by this server")
    if not found:  # (vLLM's rule)
        raise InvalidInput(f"'{name}' must set one of {', '.join(_STRUCTURED)}")
    return _one([(f"{name}.{k}", c) for k, c in found], name)


def tgi_grammar(value: Any, name: str) -> OutputConstraint | None:
    """TGI's ``grammar``: ``{"type": "json", "value": schema}`` or ``{"type": "regex",
    "value": pattern}`` (``json_schema``, as its chat route writes OpenAI's, too)."""
    doc = _object(value, name)
    kind, spec = doc.get("type"), doc.get("value")
    if kind == "json":
        return json_schema(spec, f"{name}.value")
    if kind == "regex":
        return regex(spec, f"{name}.value")
    if kind == "json_schema":
        inner = _object(spec, f"{name}.value")
        return json_schema(inner.get("schema"), f"{name}.value.schema")
    raise InvalidInput(f"'{name}.type' must be json or regex, got {kind!r:.100}")


def ollama_format(value: Any, name: str) -> OutputConstraint | None:
    """Ollama's ``format``: ``"json"`` (any JSON object, as its JSON mode writes) or a JSON
    schema object; ``""`` is none."""
    if value == "":
        return None
    if value == "json":
        return json_object()
    if isinstance(value, dict):
        return json_schema(value, name)
    raise InvalidInput(f"'{name}' must be \"json\" or a JSON schema object, got {value!r:.100}")


@dataclass(frozen=True, slots=True)
class Form:
    """A wire key that asks for a constraint, and the reader of its value."""

    key: str
    read: Callable[[Any, str], OutputConstraint | None]


# vLLM's fields, on its OpenAI server and its simple API alike
VLLM_FORMS = (
    Form("structured_outputs", structured_outputs),
    Form("guided_json", json_schema),
    Form("guided_regex", regex),
    Form("guided_choice", choice),
    Form("guided_grammar", grammar),
)
OPENAI_FORMS = (Form("response_format", response_format), *VLLM_FORMS)
TGI_FORMS = (Form("grammar", tgi_grammar),)
OLLAMA_FORMS = (Form("format", ollama_format),)  # for its family, when it is served


def read_constraint(
    doc: Mapping[str, Any], forms: tuple[Form, ...], where: str = ""
) -> OutputConstraint | None:
    """The constraint ``doc`` asks for through ``forms`` (None: none); two at once is a 400."""
    found = []
    for form in forms:
        value = doc.get(form.key)
        if value is not None:
            name = f"{where}.{form.key}" if where else form.key
            found.append((name, form.read(value, name)))
    return _one(found, where or "the request")


def _one(found: list[tuple[str, OutputConstraint | None]], where: str) -> OutputConstraint | None:
    asked = [(name, c) for name, c in found if c is not None]
    if len(asked) > 1:
        names = ", ".join(f"'{name}'" for name, _ in asked)
        raise InvalidInput(
            "You can only use one kind of structured outputs constraint but multiple are "
            f"specified in {where}: {names}"
        )
    return asked[0][1] if asked else None


@runtime_checkable
class ConstraintCompiler(Protocol):
    """A generator that compiles constraints itself (the built-in engine). One that does not
    (runtime vllm) checks them where its engine takes the request."""

    def constraint_ready(self, constraint: OutputConstraint) -> bool:
        """Already compiled (cheap: a cache lookup)."""
        ...

    def compile_constraint(self, constraint: OutputConstraint) -> None:
        """Compile and keep it; InvalidInput naming the problem when it cannot compile."""
        ...


async def prepare_constraint(generator: object, constraint: OutputConstraint | None) -> None:
    """``constraint`` compiled for ``generator`` before its request is queued: on the
    request-work threads unless it is compiled already (InvalidInput if it cannot be)."""
    if constraint is None or not isinstance(generator, ConstraintCompiler):
        return
    if not generator.constraint_ready(constraint):
        await run_request_work(generator.compile_constraint, constraint)
