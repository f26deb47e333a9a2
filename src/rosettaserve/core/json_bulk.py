"""JSON documents whose numeric arrays are read straight into numpy, not as Python numbers.

A JSON list of numbers costs a Python float per element to read (and as much again to turn into
an array): a million of them, or a few hundred in every request. Every flat array of plain
numbers of at least MIN_ARRAY bytes that is the value of the given key is cut out of the text,
read into one int64, uint64 or float64 buffer, and a marker takes its place; the
rest of the (now small) document is read as usual and each marker is swapped for its array.
Only flat arrays of numbers qualify (simdjson refuses booleans, nulls and strings in a numeric
buffer), so nested, boolean, null or string data takes the ordinary path and gets the ordinary
errors. Whatever the fast path cannot account for, it gives up on: the caller then reads the
whole body the ordinary way.

The reader is json_numbers, in C (built by scripts/compile_native.py, as the compiled request
path is). It reads every JSON number to the correctly rounded double (Clinger's fast path, else
Eisel-Lemire, else Python's own reader for the rare decimal beyond 19 digits whose rounding they
leave open), bit for bit what float() reads; simdjson reads the arrays it declines (integers
beyond int64 in an integer array, numbers beyond float64), and everything when it is not built.
Simdjson builds a tape entry per number and then copies the tape into a buffer; json_numbers
writes each number's value once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import orjson
import simdjson

try:
    from rosettaserve.core import json_numbers
except ImportError:  # not built (scripts/compile_native.py): simdjson reads everything
    json_numbers = None  # type: ignore[assignment]

# Bytes of array text worth a bulk read: below ~1.3 KB (64 float32 values as clients widen
# them) both reads cost the same [cost: bulk-read].
MIN_ARRAY = 1024
MIN_BODY = MIN_ARRAY  # a shorter body cannot hold such an array: no search
_BLANKS = (b" ", b"\t", b"\r", b"\n")
_FRACTION = (b".", b"e", b"E")
_NUMBER_STARTS = tuple(bytes([c]) for c in b"-0123456789")  # compared, so a bytearray body works
MARK = "\x00rosettaserve-bulk"  # a key that no real request carries
_MARK_JSON = b'"\\u0000rosettaserve-bulk"'


def find_arrays(body: bytes | bytearray, key: bytes) -> list[tuple[int, int]]:
    """(start, end) of each candidate array's text, brackets included, in document order: the
    value of ``key`` when it is a list that starts with a number, up to the first "]" (what it
    holds, the reader checks: a list inside, "[1, [2]]", is not a number, so the reader declines
    the span and the body takes the ordinary path; looking for one here took a second pass over
    the array, 0.6-1.7% of the 1 MiB JSON request's server cycles; strings, as in BYTES data,
    are not worth a try). json_numbers.find is the same search in C [cost: bulk-find]; the
    Python below is its reference where it is not built."""
    if json_numbers is not None:
        return json_numbers.find(body, key, MIN_ARRAY)
    spans = []
    quoted = b'"' + key + b'"'
    at = body.find(quoted)
    while at >= 0:
        resume = at + len(quoted)
        colon = _skip_blanks(body, resume)
        if body[colon : colon + 1] == b":":
            start = _skip_blanks(body, colon + 1)
            if body[start : start + 1] == b"[" and _starts_a_number(body, start + 1):
                end = body.find(b"]", start)
                if end - start >= MIN_ARRAY:
                    spans.append((start, end + 1))
                    resume = end + 1  # past the array (not numbers only? simdjson refuses it)
        at = body.find(quoted, resume)
    return spans


def _starts_a_number(body: bytes | bytearray, at: int) -> bool:
    first = _skip_blanks(body, at)
    return body[first : first + 1] in _NUMBER_STARTS


def _skip_blanks(body: bytes | bytearray, at: int) -> int:
    while body[at : at + 1] in _BLANKS:
        at += 1
    return at


def read_array(text: bytes | bytearray | memoryview, single: bool = False) -> np.ndarray | None:
    """A flat numeric JSON array as int64 (or uint64 beyond int64) or float64; None if it cannot
    be read exactly (out-of-range numbers: the ordinary path reports them). ``single`` (an FP32
    tensor's data): floats may come as float32 instead, what numpy's cast of the float64 array
    gives, unless a value is beyond float32 (then float64, for the cast's range error)."""
    if json_numbers is not None and single:
        # read_single declines exactly what read declines (its floats only end up narrower), so
        # a declined FP32 array goes on to simdjson without being parsed a second time
        read_single = json_numbers.read_single(text)
        if read_single is not None:
            return np.frombuffer(read_single[0], dtype=read_single[1])
    elif json_numbers is not None:
        read = json_numbers.read(text)
        if read is not None:
            values, is_float = read
            return np.frombuffer(values, dtype=np.float64 if is_float else np.int64)
    text = bytes(text)  # simdjson takes no memoryview
    integral = not any(mark in text for mark in _FRACTION)
    kinds: tuple[tuple[Literal["i", "u", "d"], type[np.generic]], ...] = (
        (("i", np.int64), ("u", np.uint64)) if integral else (("d", np.float64),)
    )
    for code, dtype in kinds:
        try:
            doc = simdjson.Parser().parse(text)
            if not isinstance(doc, simdjson.Array):
                return None
            as_buffer: Any = doc.as_buffer  # an ArrayBuffer, whatever simdjson's stubs say
            return np.frombuffer(as_buffer(of_type=code), dtype=dtype)
        except (ValueError, TypeError, RuntimeError):  # RuntimeError: an integer beyond 64 bits
            continue
    return None


def loads(
    body: bytes | bytearray, key: bytes, place: Callable[[Any, list[memoryview]], int]
) -> Any:
    """The document with bulk arrays swapped in, or None when the fast path does not apply.

    ``place(doc, texts)`` swaps each marker ``{MARK: i}`` where the caller expects it for the
    array ``texts[i]`` reads (``swap``) and returns how many it swapped; any other count means a
    marker landed elsewhere (the key also named something else) or an array was not read, and
    the fast path gives up. The arrays are read there, where the caller knows the datatype they
    are for: an FP32 tensor's floats are read as float32 straight away (``read_array``)."""
    if len(body) < MIN_BODY:
        return None
    spans = find_arrays(body, key)
    if not spans:
        return None
    view = memoryview(body)
    texts: list[memoryview] = []
    parts: list[bytes | memoryview] = []
    last = 0
    for i, (start, end) in enumerate(spans):
        texts.append(view[start:end])
        parts += [view[last:start], b"{%s:%d}" % (_MARK_JSON, i)]
        last = end
    parts.append(view[last:])
    try:
        doc = orjson.loads(b"".join(parts))
    except orjson.JSONDecodeError:
        return None  # a match inside a string broke the text: read it the ordinary way
    return doc if place(doc, texts) == len(texts) else None


def marker_index(value: Any) -> int | None:
    """The array index a marker stands for (None: not a marker)."""
    if type(value) is dict and len(value) == 1 and type(value.get(MARK)) is int:
        return int(value[MARK])
    return None


def swap(
    container: dict[str, Any],
    key: str,
    texts: list[memoryview],
    used: set[int],
    single: bool = False,
) -> int:
    """Put the array a marker at ``container[key]`` stands for in its place, read from its text
    (``single``: for an FP32 tensor, see read_array): 1 if swapped, 0 if not (or not read)."""
    index = marker_index(container.get(key))
    if index is None or not 0 <= index < len(texts) or index in used:
        return 0
    used.add(index)
    array = read_array(texts[index], single)
    if array is None:
        return 0
    container[key] = array
    return 1
