"""JSON read from a text that may still be growing, written back canonically as it is read.

A tool call's arguments stream while the model writes them; the client must receive fragments
that add up to exactly the arguments of the finished call. So arguments are not copied from
the model's text but re-written token by token in one canonical form, ``json.dumps(value,
ensure_ascii=False)``'s (vLLM's), and only what no later text can change is written: a number
once the character after it is read, a string character once its escape is complete. What a
prefix of a text yields is then always a prefix of what the whole text yields.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

WHITESPACE = " \t\n\r"
NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
NUMBER_CHARS = frozenset("0123456789+-.eE")
LITERALS = ("true", "false", "null")
ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


@dataclass(slots=True)
class Scan:
    """What was read of one JSON value: ``canon``, its canonical text so far; ``end``, the index
    after it once complete (None: not yet); ``error``, the text cannot be JSON (``canon`` then
    holds what was read before the fault); ``value``: a string's decoded characters so far."""

    canon: str
    end: int | None = None
    error: bool = False
    value: str = ""


def skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i] in WHITESPACE:
        i += 1
    return i


def canonical_chars(chars: str) -> str:
    """``chars`` as they appear inside a canonical JSON string (quotes excluded)."""
    return json.dumps(chars, ensure_ascii=False)[1:-1]


def scan_string(text: str, i: int, final: bool) -> Scan:
    """The string whose opening quote is ``text[i]``."""
    chars: list[str] = []
    j = i + 1
    while j < len(text):
        c = text[j]
        if c == '"':
            value = "".join(chars)
            return Scan(f'"{canonical_chars(value)}"', j + 1, value=value)
        if c < " ":
            return _broken_string(chars)
        if c != "\\":
            chars.append(c)
            j += 1
            continue
        decoded, j = _escape(text, j)
        if decoded is None:
            if j < 0:
                return _broken_string(chars)
            break  # an escape not yet complete
        chars.append(decoded)
    value = "".join(chars)
    return Scan(f'"{canonical_chars(value)}', None, final, value)


def _broken_string(chars: list[str]) -> Scan:
    value = "".join(chars)
    return Scan(f'"{canonical_chars(value)}', None, True, value)


def _escape(text: str, j: int) -> tuple[str | None, int]:
    """The escape at ``text[j]`` (a backslash): its character and the index after it; (None,
    -1) for a malformed one, (None, j) for one the text has not finished yet."""
    if j + 1 >= len(text):
        return None, j
    kind = text[j + 1]
    if kind in ESCAPES:
        return ESCAPES[kind], j + 2
    if kind != "u":
        return None, -1
    unit = _hex4(text, j + 2)
    if unit is None or unit < 0:
        return None, -1 if unit is not None else j
    if not 0xD800 <= unit < 0xDC00:
        return (None, -1) if 0xDC00 <= unit < 0xE000 else (chr(unit), j + 6)
    return _low_half(text, j, unit)


def _low_half(text: str, j: int, high: int) -> tuple[str | None, int]:
    """A high surrogate's escape at ``j``: the character it makes with the low half that must
    follow it (a lone half is malformed)."""
    rest = text[j + 6 : j + 12]
    if rest[:2] != "\\u"[: len(rest)]:
        return None, -1
    low = _hex4(text, j + 8) if len(rest) > 2 else None
    if low is None:
        return None, j
    if not 0xDC00 <= low < 0xE000:
        return None, -1
    return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)), j + 12


def _hex4(text: str, k: int) -> int | None:
    """Four hex digits at ``k``: their value; None while incomplete; -1 when not hex."""
    digits = text[k : k + 4]
    if any(d not in "0123456789abcdefABCDEF" for d in digits):
        return -1
    return int(digits, 16) if len(digits) == 4 else None


def _scalar(text: str, i: int, final: bool) -> Scan:
    """A number or a literal at ``text[i]``."""
    if text[i].isalpha():
        j = i
        while j < len(text) and text[j].isalpha():
            j += 1
        word = text[i:j]
        if word in LITERALS and (j < len(text) or final):
            return Scan(word, j)
        partial = j == len(text) and not final and any(w.startswith(word) for w in LITERALS)
        return Scan("", None, not partial)
    j = i
    while j < len(text) and text[j] in NUMBER_CHARS:
        j += 1
    if j == len(text) and not final:
        return Scan("")  # the number may go on
    run = text[i:j]
    if NUMBER.fullmatch(run) is None:
        return Scan("", None, True)
    return Scan(json.dumps(json.loads(run)), j)


# Where a read stopped, for a stream's next, longer text to resume from: the text read from the
# start (a whole number of tokens: what they say cannot change), what to expect next, the
# canonical text written, the containers open. Keyed by the value's start.
Memo = dict[int, tuple[str, str, str, tuple[str, ...]]]


class _Reader:
    """One JSON value read from ``text[start:]``, the containers open kept on a stack."""

    def __init__(self, text: str, final: bool) -> None:
        self.text, self.final = text, final
        self.out: list[str] = []
        self.stack: list[str] = []  # "{" or "["
        self.mark: tuple[int, str, int, tuple[str, ...]] = (0, "value", 0, ())  # last boundary

    def resume(self, start: int, memo: Memo) -> tuple[int, str]:
        """Where the read of a shorter text stopped, if this text goes on from it."""
        saved = memo.get(start)
        if saved is None or not self.text.startswith(saved[0], start):
            return start, "value"
        read, expect, out, stack = saved
        self.out, self.stack = [out], list(stack)
        return start + len(read), expect

    def remember(self, start: int, memo: Memo) -> None:
        i, expect, written, stack = self.mark
        if i > start:
            memo[start] = (self.text[start:i], expect, "".join(self.out[:written]), stack)

    def result(self, end: int | None = None, error: bool = False) -> Scan:
        return Scan("".join(self.out), end, error or (end is None and self.final))

    def read(self, i: int, expect: str = "value") -> Scan:
        text = self.text
        while True:
            i = skip_space(text, i)
            self.mark = (i, expect, len(self.out), tuple(self.stack))
            if i >= len(text):
                return self.result()
            c = text[i]
            if expect == "value" or (expect == "first" and c != "]"):
                step = self.value(i)
                if isinstance(step, Scan):
                    return step
                i, expect = step
            elif expect in ("key", "first_key"):
                if c == "}" and expect == "first_key":
                    i, expect = self.close(i)
                elif c == '"':
                    key = scan_string(text, i, self.final)
                    self.out.append(key.canon)
                    if key.end is None:
                        return self.result(None, key.error)
                    i, expect = key.end, "colon"
                else:
                    return self.result(None, True)
            elif expect == "colon":
                if c != ":":
                    return self.result(None, True)
                self.out.append(": ")
                i, expect = i + 1, "value"
            elif c == "," and expect == "next":
                self.out.append(", ")
                i, expect = i + 1, "key" if self.stack[-1] == "{" else "value"
            elif c in "}]" and self.stack and c == "}]"["{[".index(self.stack[-1])]:
                i, expect = self.close(i)
            else:
                return self.result(None, True)
            if expect == "done":
                return self.result(i)

    def value(self, i: int) -> tuple[int, str] | Scan:
        c = self.text[i]
        if c in "{[":
            self.out.append(c)
            self.stack.append(c)
            return i + 1, "first_key" if c == "{" else "first"
        scan = (
            scan_string(self.text, i, self.final) if c == '"' else _scalar(self.text, i, self.final)
        )
        self.out.append(scan.canon)
        if scan.end is None:
            return self.result(None, scan.error)
        return scan.end, "next" if self.stack else "done"

    def close(self, i: int) -> tuple[int, str]:
        self.out.append("}" if self.stack.pop() == "{" else "]")
        return i + 1, "next" if self.stack else "done"


def scan_json(text: str, i: int, final: bool, memo: Memo | None = None) -> Scan:
    """The JSON value that starts at ``text[i]`` (after any whitespace); ``final``: the text
    will not grow (what is unfinished is then an error). ``memo``: where the reads of this
    value's shorter texts stopped (a stream's), so a longer text is read from there on."""
    reader = _Reader(text, final)
    if memo is None:
        return reader.read(i)
    scan = reader.read(*reader.resume(i, memo))
    if scan.end is None and not scan.error:
        reader.remember(i, memo)
    return scan
