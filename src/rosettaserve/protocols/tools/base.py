"""What a tool parser reads from a model's text, and the one driver that streams it.

A parser is a pure function of the text so far: ``parse(text, final)`` says the content and
the calls that text certainly holds (``final``: the text is complete). Every parser keeps one
rule: what it says of a prefix is a prefix of what it says of any longer text (the content a
prefix of the content, the calls a prefix of the calls, each call's name whole and its
arguments a prefix). The stream is then the difference between successive parses, and a
stream, however the text was cut into deltas, adds up to exactly the answer of the whole text:
the non-streamed answer is the same function called once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from rosettaserve.core.tools import ToolCall
from rosettaserve.protocols.tools.jsonscan import Memo


@dataclass(slots=True)
class PartialCall:
    name: str
    arguments: str = ""  # the arguments' JSON text so far


@dataclass(slots=True)
class Parsed:
    content: str = ""
    calls: list[PartialCall] = field(default_factory=list)


class ParseFn(Protocol):
    def __call__(self, text: str, final: bool, memo: Memo | None = None) -> Parsed:
        """What ``text`` holds (``final``: it is whole); ``memo``: a stream's, so its next
        reading resumes where this one stopped (the answer is the same without it)."""
        ...


def openai_call_id() -> str:
    return f"chatcmpl-tool-{uuid.uuid4().hex}"


@dataclass(frozen=True, slots=True)
class ToolParser:
    """A parser by name (vLLM's ``--tool-call-parser`` names): how it reads a text and the ids
    of its calls."""

    name: str
    parse: ParseFn
    new_id: Callable[[], str] = openai_call_id


@dataclass(slots=True)
class CallDelta:
    """A piece of call ``index``: its id and name on its first piece, then arguments text."""

    index: int
    arguments: str
    id: str | None = None
    name: str | None = None


@dataclass(slots=True)
class Extracted:
    content: str | None  # None: the text was only calls
    calls: list[ToolCall]


def extract(parser: ToolParser, text: str) -> Extracted:
    """The whole text's content and calls (a non-streamed answer)."""
    parsed = parser.parse(text, True)
    calls = [ToolCall(parser.new_id(), c.name, c.arguments) for c in parsed.calls]
    content = parsed.content if parsed.content or not calls else None
    return Extracted(content, calls)


class ToolStream:
    """One sequence's text, fed as it streams: each feed returns the new content and the call
    pieces that text added."""

    def __init__(self, parser: ToolParser) -> None:
        self.parser = parser
        self.text = ""
        self.sent = Parsed()
        self.ids: list[str] = []
        self.memo: Memo = {}

    def feed(self, text: str, final: bool = False) -> tuple[str, list[CallDelta]]:
        if not text and not final:
            return "", []  # nothing new to read
        self.text += text
        now = self.parser.parse(self.text, final, self.memo)
        content = now.content[len(self.sent.content) :]
        deltas: list[CallDelta] = []
        for index, call in enumerate(now.calls):
            if index < len(self.sent.calls):
                fresh = call.arguments[len(self.sent.calls[index].arguments) :]
                if fresh:
                    deltas.append(CallDelta(index, fresh))
            else:
                self.ids.append(self.parser.new_id())
                deltas.append(CallDelta(index, call.arguments, self.ids[index], call.name))
        self.sent = Parsed(now.content, [PartialCall(c.name, c.arguments) for c in now.calls])
        return content, deltas

    @property
    def called(self) -> bool:
        return bool(self.sent.calls)


def partial_tag(text: str, tag: str) -> int:
    """How many characters at the end of ``text`` may begin ``tag`` (held back until known)."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0
