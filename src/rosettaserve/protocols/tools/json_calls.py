"""Calls written as JSON objects ``{"name": ..., "arguments": {...}}``, read as they grow.

The call exists once its name is read whole (the stream then sends its id and name); its
arguments follow in canonical JSON (jsonscan.py) as they are read, buffered while the name is
still to come. A call object that closes without arguments has ``{}``.
"""

from __future__ import annotations

from dataclasses import dataclass

from rosettaserve.protocols.tools.base import PartialCall
from rosettaserve.protocols.tools.jsonscan import Memo, scan_json, scan_string, skip_space


@dataclass(slots=True)
class CallRead:
    """One call object read: ``end`` the index after its ``}`` (None: not closed), ``error``
    the text cannot be such an object (what was read before the fault stays)."""

    name: str | None = None
    arguments: str = ""
    end: int | None = None
    error: bool = False

    @property
    def call(self) -> PartialCall | None:
        return None if self.name is None else PartialCall(self.name, self.arguments)

    def stop(self, error: bool) -> CallRead:
        self.error = error
        return self


def read_call(
    text: str, i: int, final: bool, args_keys: tuple[str, ...], memo: Memo | None = None
) -> CallRead:
    """The call object at ``text[i]`` (after whitespace); ``args_keys``: the names its
    arguments may go by (the first one met counts); ``memo``: a stream's (jsonscan.py)."""
    read = CallRead()
    i = skip_space(text, i)
    if i >= len(text) or text[i] != "{":
        return read.stop(i < len(text) or final)
    i, args_seen, may_close = i + 1, False, True
    while True:
        i = skip_space(text, i)
        if i >= len(text):
            return read.stop(final)
        if text[i] == "}" and may_close:
            read.end = i + 1
            read.arguments = read.arguments if args_seen else "{}"
            return read
        key = scan_string(text, i, final) if text[i] == '"' else None
        if key is None or key.end is None:
            return read.stop(key is None or key.error)
        i = skip_space(text, key.end)
        if i >= len(text) or text[i] != ":":
            return read.stop(i < len(text) or final)
        args = key.value in args_keys and not args_seen
        i = _member(read, key.value, text, i + 1, final=final, args=args, memo=memo)
        if i < 0:
            return read
        args_seen = args_seen or key.value in args_keys
        i = skip_space(text, i)
        if i < len(text) and text[i] == ",":
            i, may_close = i + 1, False
        elif i < len(text) and text[i] == "}":
            may_close = True
        else:
            return read.stop(i < len(text) or final)


def _member(
    read: CallRead, key: str, text: str, i: int, *, final: bool, args: bool, memo: Memo | None
) -> int:
    """The value of member ``key`` read into ``read``: the index after it, or -1 when the
    text ends or fails in it (``read.error`` says which); ``args``: the value is the call's
    arguments."""
    i = skip_space(text, i)
    if key == "name" and read.name is None:
        if i >= len(text) or text[i] != '"':
            read.error = i < len(text) or final
            return -1
        scan = scan_string(text, i, final)
        if scan.end is not None:
            read.name = scan.value
    else:
        scan = scan_json(text, i, final, memo)
        if args:
            read.arguments = scan.canon
    if scan.end is None:
        read.error = scan.error
        return -1
    return scan.end
