"""The JSON tool parsers, with vLLM's meaning (``--tool-call-parser`` names).

- ``hermes`` (Hermes 2 Pro, Qwen 2.5/3, ...): calls in ``<tool_call>{"name", "arguments"}
  </tool_call>`` blocks; the content is the text before the first block.
- ``llama3_json`` (Llama 3.1-3.3 JSON calls): an answer that begins with ``<|python_tag|>`` or
  ``{`` is calls, ``{"name", "parameters" | "arguments"}`` objects separated by ``;``.
- ``mistral``: ``[TOOL_CALLS]`` then a JSON list of ``{"name", "arguments"}``, or (tokenizer
  v11+) ``[TOOL_CALLS]name[ARGS]{...}`` per call; the content is the text before it.
- ``required``: the output a ``tool_choice: required`` constraint allows, a JSON list of
  ``{"name", "parameters"}``.

Where the text stops being calls, vLLM drops every call and answers the whole text as content;
a stream cannot take back what it sent, so here a fault before the first call's name is read
makes the whole text content (as vLLM), and a fault after it ends the calls: those read stand,
the rest of the text is dropped (vLLM's stream does the same).
"""

from __future__ import annotations

from rosettaserve.protocols.tools.base import Parsed, PartialCall, partial_tag
from rosettaserve.protocols.tools.json_calls import CallRead, read_call
from rosettaserve.protocols.tools.jsonscan import Memo, scan_json, skip_space

HERMES_START, HERMES_END = "<tool_call>", "</tool_call>"
PYTHON_TAG = "<|python_tag|>"
MISTRAL_CALLS, MISTRAL_ARGS = "[TOOL_CALLS]", "[ARGS]"


def content_until(text: str, tag: str, final: bool) -> tuple[str, int]:
    """The text before ``tag`` and where ``tag`` is (-1: not there; what may begin it is held
    back unless ``final``)."""
    at = text.find(tag)
    if at >= 0:
        return text[:at], at
    return (text if final else text[: len(text) - partial_tag(text, tag)]), -1


def failed(text: str, calls: list[PartialCall], content: str = "") -> Parsed:
    """A fault: before any call, the whole text is content; after one, the calls (and the
    content before them) stand."""
    return Parsed(content, calls) if calls else Parsed(text)


def hermes(text: str, final: bool, memo: Memo | None = None) -> Parsed:
    content, at = content_until(text, HERMES_START, final)
    if at < 0:
        return Parsed(content)
    calls: list[PartialCall] = []
    while at >= 0:
        start = at + len(HERMES_START)
        close = text.find(HERMES_END, start)
        if close >= 0:
            body, body_final = text[start:close], True
        else:
            body, body_final = text[start : len(text) - partial_tag(text, HERMES_END)], final
        read = read_call(body, 0, body_final, ("arguments",), memo)
        if read.call is None:
            return failed(text, calls, content) if read.error else Parsed(content, calls)
        calls.append(read.call)
        if read.error or close < 0:
            return Parsed(content, calls)
        at = text.find(HERMES_START, close + len(HERMES_END))
    return Parsed(content, calls)


def llama3_json(text: str, final: bool, memo: Memo | None = None) -> Parsed:
    if not text.startswith((PYTHON_TAG, "{")):
        undecided = PYTHON_TAG.startswith(text) and not final
        return Parsed("" if undecided else text)
    i = len(PYTHON_TAG) if text.startswith(PYTHON_TAG) else 0
    return _separated(text, i, final, ";", ("parameters", "arguments"), memo=memo)


def required(text: str, final: bool, memo: Memo | None = None) -> Parsed:
    i = skip_space(text, 0)
    if i >= len(text):
        return failed(text, []) if final else Parsed()
    if text[i] != "[":
        return failed(text, [])
    return _json_list(text, i + 1, final, ("parameters",), memo)


def mistral(text: str, final: bool, memo: Memo | None = None) -> Parsed:
    content, at = content_until(text, MISTRAL_CALLS, final)
    if at < 0:
        return Parsed(content)
    i = skip_space(text, at + len(MISTRAL_CALLS))
    if i >= len(text):
        return Parsed(content) if not final else failed(text, [])
    if text[i] == "[":
        parsed = _json_list(text, i + 1, final, ("arguments",), memo)
        return Parsed(content, parsed.calls) if parsed.calls or not parsed.content else parsed
    return _mistral_named(text, at, final, content, memo)


def _mistral_named(text: str, at: int, final: bool, content: str, memo: Memo | None) -> Parsed:
    """v11+: ``[TOOL_CALLS]name[ARGS]{...}`` for each call."""
    calls: list[PartialCall] = []
    while at >= 0:
        start = at + len(MISTRAL_CALLS)
        args = text.find(MISTRAL_ARGS, start)
        if args < 0:
            held = partial_tag(text, MISTRAL_ARGS)
            pending = not final and "[" not in text[start : len(text) - held]
            return Parsed(content, calls) if pending else failed(text, calls, content)
        name = text[start:args].strip()
        if not name or not name.replace("_", "a").replace("-", "a").isalnum():
            return failed(text, calls, content)
        scan = scan_json(text, args + len(MISTRAL_ARGS), final, memo)
        calls.append(PartialCall(name, scan.canon))
        if scan.end is None:
            return Parsed(content, calls)
        at = text.find(MISTRAL_CALLS, scan.end)
    return Parsed(content, calls)


def _json_list(
    text: str, i: int, final: bool, args_keys: tuple[str, ...], memo: Memo | None
) -> Parsed:
    """Call objects separated by commas up to ``]``, from ``text[i]`` (after the ``[``)."""
    i = skip_space(text, i)
    if i < len(text) and text[i] == "]":
        return failed(text, [])  # no call at all: vLLM's parse has no call either
    return _separated(text, i, final, ",", args_keys, memo=memo)


def _separated(
    text: str,
    i: int,
    final: bool,
    separator: str,
    args_keys: tuple[str, ...],
    *,
    memo: Memo | None = None,
) -> Parsed:
    calls: list[PartialCall] = []
    while True:
        read: CallRead = read_call(text, i, final, args_keys, memo)
        if read.call is None:
            return failed(text, calls) if read.error else Parsed("", calls)
        calls.append(read.call)
        if read.end is None:
            return Parsed("", calls)
        i = skip_space(text, read.end)
        if i < len(text) and text[i] == separator:
            i += 1
        else:  # the end of the calls (a list's ``]``), or text after them: dropped
            return Parsed("", calls)


def named(name: str) -> ParseNamed:
    return ParseNamed(name)


class ParseNamed:
    """A named ``tool_choice``: the whole output is the named function's arguments (vLLM's)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, text: str, final: bool, memo: Memo | None = None) -> Parsed:
        return Parsed("", [PartialCall(self.name, text)])
