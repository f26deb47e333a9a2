"""A request's tools and tool choice -> how it is generated and how its answer is read, for
every family (OpenAI chat and Responses, Anthropic Messages, Ollama).

- ``none``: the tools are not offered; the answer is text.
- ``auto``: the chat template offers the tools, the model decides, and the model's
  ``parameters.tool_parser`` reads its text (a model without one refuses ``auto``: 400).
- ``required`` and a named function: constrained decoding, built as vLLM builds it: for
  ``required`` a JSON list of ``{"name", "parameters"}`` items, at least one, each one of the
  tools (at most one when parallel calls are off); for a named function its ``parameters``
  schema, the output being that call's arguments.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rosettaserve.core import structured_output
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import ChatTemplate, SamplingParams
from rosettaserve.core.structured_output import OutputConstraint
from rosettaserve.core.tools import ChoiceMode, ToolChoice, ToolSpec
from rosettaserve.protocols.tools import PARSERS, REQUIRED, ToolParser, named_parser

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # OpenAI's rule for a function's name
EMPTY_PARAMETERS: Mapping[str, Any] = {"type": "object", "properties": {}}


def check_tool(spec: ToolSpec, where: str) -> None:
    """A tool's name follows OpenAI's rule and its parameters are a JSON schema (400 if not)."""
    if NAME.fullmatch(spec.name) is None:
        raise InvalidInput(
            f"'{where}.name' must be 1 to 64 letters, digits, underscores or dashes, "
            f"got {spec.name!r}"
        )
    check_schema(spec.parameters, f"{where}.parameters")


def check_schema(schema: Any, where: str) -> None:
    import jsonschema

    if not isinstance(schema, Mapping):
        raise InvalidInput(f"'{where}' must be a JSON schema object, got {schema!r}")
    validator = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
    try:
        validator.check_schema(dict(schema))
    except jsonschema.SchemaError as exc:
        path = "".join(f"[{p!r}]" for p in exc.absolute_path)
        raise InvalidInput(f"'{where}' is not a valid JSON schema: {path} {exc.message}") from None


def check_choice(tools: Sequence[ToolSpec], choice: ToolChoice, where: str) -> None:
    names = [t.name for t in tools]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidInput(f"'tools' names {', '.join(duplicates)} more than once")
    if choice.mode in (ChoiceMode.REQUIRED, ChoiceMode.NAMED) and not tools:
        raise InvalidInput(f"'{where}' {choice.mode.value} needs 'tools'")
    if choice.mode is ChoiceMode.NAMED and choice.name not in names:
        raise InvalidInput(f"'{where}' names function '{choice.name}', which is not in 'tools'")


@dataclass(frozen=True, slots=True)
class ToolPlan:
    """How one request with tools is generated and read."""

    tools: tuple[ToolSpec, ...]
    choice: ToolChoice
    parser: ToolParser | None  # reads the answer (None: the answer is text)
    constraint: OutputConstraint | None = None

    @property
    def offered(self) -> bool:
        """The chat template renders the tools."""
        return bool(self.tools) and self.choice.mode is not ChoiceMode.NONE

    @property
    def ends_with_tool_calls(self) -> bool:
        """A choice that called ends with ``finish_reason: tool_calls`` (a named function's
        ends as its generation did, as vLLM's and OpenAI's)."""
        return self.choice.mode is not ChoiceMode.NAMED

    def apply(self, params: SamplingParams) -> None:
        if self.constraint is not None:
            params.constraint = self.constraint
        if self.offered:  # tool tokens (often special) must reach the parser, as vLLM keeps them
            params.skip_special_tokens = False


def tool_plan(
    tools: Sequence[ToolSpec], choice: ToolChoice, options: Mapping[str, Any], model: str
) -> ToolPlan:
    """The plan for ``tools`` and ``choice`` on a model whose parameters are ``options``."""
    specs = tuple(tools)
    mode = choice.mode if specs else ChoiceMode.NONE
    if mode is ChoiceMode.NONE:
        return ToolPlan(specs, choice, None)
    if mode is ChoiceMode.AUTO:
        return ToolPlan(specs, choice, model_parser(options, model))
    if mode is ChoiceMode.REQUIRED:
        return ToolPlan(specs, choice, REQUIRED, json_schema(required_schema(specs, choice)))
    tool = next(t for t in specs if t.name == choice.name)
    return ToolPlan(specs, choice, named_parser(tool.name), json_schema(parameters_of(tool)))


def model_parser(options: Mapping[str, Any], model: str) -> ToolParser:
    name = options.get("tool_parser")
    if not name:
        raise InvalidInput(
            f"model '{model}' has no tool parser, so it cannot choose tools itself "
            "('tool_choice': 'auto', the default with 'tools'): set parameters.tool_parser in "
            f"its model.yaml (one of {', '.join(sorted(PARSERS))}), or ask for 'required' or "
            "a named function"
        )
    parser = PARSERS.get(str(name))
    if parser is None:
        raise InvalidInput(
            f"model '{model}' names tool parser {name!r}, which is not one of "
            f"{', '.join(sorted(PARSERS))}"
        )
    return parser


def parameters_of(tool: ToolSpec) -> dict[str, Any]:
    """A tool's parameters schema; none (or empty) is an object with no properties (vLLM's)."""
    if not tool.parameters:
        return dict(EMPTY_PARAMETERS)
    params: dict[str, Any] = copy.deepcopy(dict(tool.parameters))
    return params


def required_schema(tools: Sequence[ToolSpec], choice: ToolChoice) -> dict[str, Any]:
    """vLLM's schema for ``required``: the tools' ``$defs`` gathered at the top (refs point
    there), one ``anyOf`` branch per tool; ``maxItems: 1`` without parallel calls."""
    defs: dict[str, Any] = {}
    branches = []
    for tool in tools:
        params = parameters_of(tool)
        for name, definition in params.pop("$defs", {}).items():
            if defs.setdefault(name, definition) != definition:
                raise InvalidInput(
                    f"Tool definition '{name}' has multiple schemas, which is not supported."
                )
        branches.append(
            {
                "properties": {
                    "name": {"type": "string", "enum": [tool.name]},
                    "parameters": params,
                },
                "required": ["name", "parameters"],
            }
        )
    schema: dict[str, Any] = {
        "type": "array",
        "minItems": 1,
        "items": {"type": "object", "anyOf": branches},
    }
    if not choice.parallel:
        schema["maxItems"] = 1
    if defs:
        schema["$defs"] = defs
    return schema


def json_schema(schema: Mapping[str, Any]) -> OutputConstraint:
    """In the schema's own key order: the arguments are written in it."""
    return structured_output.json_schema(dict(schema), "tools")


def template_tools(tools: Sequence[ToolSpec]) -> tuple[dict[str, Any], ...]:
    """The tools in OpenAI chat's shape, the one chat templates are written for (a family
    whose tools have another shape hands them to the template so)."""
    return tuple(
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": parameters_of(t),
            },
        }
        for t in tools
    )


def family_plan(
    tools: Sequence[ToolSpec],
    choice: ToolChoice,
    options: Mapping[str, Any],
    model: str,
    params: SamplingParams,
) -> tuple[ToolPlan | None, ChatTemplate | None]:
    """For a family that is not OpenAI chat (Responses, Messages): the request's plan, applied
    to ``params``, and the chat template's variables offering the tools (None, None: no tools
    or ``none``: the tools are not offered and the answer is text)."""
    plan = tool_plan(tools, choice, options, model)
    if plan.parser is None:
        return None, None
    plan.apply(params)
    return plan, ChatTemplate(tools=template_tools(tools))
