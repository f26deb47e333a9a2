"""``pythonic`` (Llama 3.2/4, ToolACE): the answer is a Python list of calls,
``[get_weather(city="Paris"), now()]``, with vLLM's meaning: an answer that begins with ``[``
is calls, each argument a keyword whose value is a literal (string, number, boolean, None, or
a list or dict of them), sent as a JSON object (``json.dumps``, as vLLM).

A call is sent whole, its name and arguments together, once its closing parenthesis is read
(a Python literal is not re-written as it is read, as the JSON parsers' arguments are). Two
differences with vLLM, both where its reading fails: a negative number (``x=-1``, which
Python reads as an operation, not a literal) is read as a number, and positional arguments
are a fault (vLLM drops them).
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from rosettaserve.protocols.tools.base import Parsed, PartialCall
from rosettaserve.protocols.tools.jsonscan import Memo, skip_space
from rosettaserve.protocols.tools.parsers import failed

NAME = re.compile(r"[A-Za-z_]\w*")
CLOSERS = {"(": ")", "[": "]", "{": "}"}


class NotALiteral(ValueError):
    pass


def pythonic(text: str, final: bool, memo: Memo | None = None) -> Parsed:
    """(``memo`` unused: a call is read whole once complete.)"""
    if not text.startswith("["):
        return Parsed("" if not text and not final else text)
    calls: list[PartialCall] = []
    i = 1
    while True:
        i = skip_space(text, i)
        match = NAME.match(text, i)
        if match is None or match.end() == len(text):
            pending = not final and (i == len(text) or match is not None)
            return Parsed("", calls) if pending else failed(text, calls)
        if text[match.end()] != "(":
            return failed(text, calls)
        end = _close(text, match.end())
        if end is None:
            return Parsed("", calls) if not final else failed(text, calls)
        try:
            arguments = _arguments(text[i:end])
        except (SyntaxError, ValueError):
            return failed(text, calls)
        calls.append(PartialCall(match.group(), arguments))
        i = skip_space(text, end)
        if i < len(text) and text[i] == ",":
            i += 1
        elif i < len(text) or final:  # "]" or anything else: the calls end here
            return Parsed("", calls) if calls else failed(text, calls)
        else:
            return Parsed("", calls)


def _close(text: str, i: int) -> int | None:
    """The index after the parenthesis that closes the one at ``text[i]`` (None: not yet; a
    bracket closed by the wrong one ends the scan there, for the call's parse to refuse)."""
    stack: list[str] = []
    quote = ""
    j = i
    while j < len(text):
        c = text[j]
        if quote:
            if c == "\\":
                j += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in CLOSERS:
            stack.append(CLOSERS[c])
        elif c in ")]}" and (not stack or stack.pop() != c or not stack):
            return j + 1
        j += 1
    return None


def _arguments(call_text: str) -> str:
    node = ast.parse(call_text, mode="eval").body
    if not isinstance(node, ast.Call) or node.args:
        raise NotALiteral("a call with keyword arguments only")
    arguments = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise NotALiteral("**kwargs is not a literal")
        arguments[keyword.arg] = _literal(keyword.value)
    return json.dumps(arguments, ensure_ascii=False)


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant) and (
        node.value is None or isinstance(node.value, str | int | float)
    ):
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, int | float)
        and not isinstance(node.operand.value, bool)
    ):
        return -node.operand.value
    if isinstance(node, ast.List):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict) and all(
        isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys
    ):
        return {k.value: _literal(v) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[union-attr]
    raise NotALiteral(f"{ast.dump(node)} is not a literal")
