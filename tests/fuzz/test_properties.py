"""Properties of the wire codecs over generated values (hypothesis): what one side writes, the
other reads back the same, and the fast readers agree with the ordinary ones."""

from __future__ import annotations

import json
from typing import Any

import hpack
import numpy as np
import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rosettaserve.transport.hpack import Decoder, encode
from tests.fuzz import asan
from tests.fuzz.targets import llm_sampling, oip_rest, tfserving_json
from tests.sampling_readers import READERS, numeric_keys

# bounded: the whole module runs in seconds; the same examples on every run
PROPERTY = settings(max_examples=150, deadline=None, database=None, derandomize=True)

NAMES = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=20)
LATIN1 = st.text(st.characters(max_codepoint=0xFF), max_size=40)
PSEUDO = st.sampled_from([":method", ":path", ":scheme", ":authority", ":status"])
FIELDS = st.lists(st.tuples(st.one_of(NAMES, PSEUDO), LATIN1), max_size=12)


@PROPERTY
@given(FIELDS)
def test_hpack_reads_back_what_it_writes(headers: list[tuple[str, str]]) -> None:
    block = encode(headers)
    assert Decoder().decode(block) == headers
    expected = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in headers]
    assert [(bytes(n), bytes(v)) for n, v in hpack.Decoder().decode(block, raw=True)] == expected


@PROPERTY
@given(st.lists(FIELDS, min_size=1, max_size=4), st.booleans(), st.sampled_from([0, 256, 4096]))
def test_hpack_reads_python_hyper_blocks(
    blocks: list[list[tuple[str, str]]], huffman: bool, table_size: int
) -> None:
    """A connection's blocks from another encoder: Huffman strings, its dynamic table (and a
    change of its size) carried from one block to the next."""
    encoder = hpack.Encoder()
    encoder.header_table_size = table_size
    decoder = Decoder()
    for headers in blocks:
        raw = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in headers]
        assert decoder.decode(encoder.encode(raw, huffman=huffman)) == headers


FLOATS32 = hnp.arrays(
    np.float32, hnp.array_shapes(max_dims=3, max_side=5), elements=st.floats(width=32)
)
FLOATS64 = hnp.arrays(np.float64, hnp.array_shapes(max_dims=3, max_side=5), elements=st.floats())


@PROPERTY
@given(st.one_of(FLOATS32, FLOATS64))
def test_tfserving_float_text_reads_back_the_same_values(array: np.ndarray) -> None:
    tfserving_json.round_trip(array, "FP32" if array.dtype == np.float32 else "FP64")


def number_text(value: int | float, style: int) -> str:
    if isinstance(value, int):
        return str(value)
    if style == 0:
        return repr(value)
    if style == 1 and abs(value) <= FLOAT32_MAX:
        return str(np.float32(value))  # a float32 as clients write it
    return f"{value:.17g}" if style == 2 else f"{value:.6e}"


NUMBERS = st.one_of(
    st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=50),
    st.lists(st.integers(-(2**70), 2**70), min_size=1, max_size=5),
    st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=50),
    st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), min_size=1, max_size=50),
    st.lists(st.one_of(st.integers(-1000, 1000), st.floats(-1e6, 1e6)), min_size=1, max_size=50),
)
FLOAT32_MAX = float(np.finfo(np.float32).max)
BLANKS = st.sampled_from(["", " ", "\n", "\t ", "\r\n"])


@PROPERTY
@given(NUMBERS, st.integers(0, 3), BLANKS)
@example([-(2**63) - 1], 0, "")  # orjson reads it as a float; json_numbers declines it
def test_the_c_number_reader_agrees_with_orjson(values: list[Any], style: int, blank: str) -> None:
    """json_numbers.c (an ordinary build of it; its AddressSanitizer build is fuzzed) on
    arrays written the ways clients write them: where it reads one, orjson reads the same."""
    reader = asan.load()
    text = (
        blank + "[" + blank + f",{blank}".join(number_text(v, style) for v in values) + "]"
    ).encode()
    result = reader.read(text)
    doc = orjson.loads(text)
    if result is None:  # declined only for integers beyond int64 in an array of integers
        exact = json.loads(text)  # orjson reads an integer below int64's range as a float
        wide = any(type(v) is int and not -(2**63) <= v < 2**63 for v in exact)
        floats = any(type(v) is float for v in exact)
        assert wide, f"an array declined: {text!r}"
        assert not floats, f"an array with floats declined: {text!r}"
        return
    buffer, is_float = result
    expected = np.array(doc, dtype=np.float64 if is_float else np.int64)
    assert np.frombuffer(buffer, dtype=expected.dtype).tobytes() == expected.tobytes()


@PROPERTY
@given(
    st.sampled_from(["FP32", "FP64", "INT64", "INT32", "UINT64", "BOOL"]),
    st.integers(200, 600),
    st.integers(0, 2**32 - 1),
)
def test_oip_bulk_reader_agrees_with_the_ordinary_one(datatype: str, count: int, seed: int) -> None:
    """Bodies large enough for json_bulk's fast path: the same tensors as the ordinary reader."""
    rng = np.random.default_rng(seed)
    if datatype.startswith("FP"):
        data: list[Any] = rng.standard_normal(count).astype(np.float32).tolist()
    elif datatype == "BOOL":
        data = rng.integers(0, 2, count).astype(bool).tolist()
    else:
        low = 0 if datatype.startswith("U") else -(2**31)
        data = rng.integers(low, 2**31, count).tolist()
    doc = {"inputs": [{"name": "x", "shape": [1, count], "datatype": datatype, "data": data}]}
    body = json.dumps(doc).encode()
    assert oip_rest.read(body, None)[0] == "request"
    oip_rest.check(body)


NUMBERS = st.one_of(
    st.floats(),  # NaN, the infinities, subnormals, -0.0 and everything between
    st.integers(),
    st.sampled_from([1e-300, 5e-324, 1e-5, 9.99e-6, 1e308, 2**31, 2**63, 2**64, 10**400]),
)


@PROPERTY
@given(st.sampled_from(sorted(READERS)), st.data())
def test_any_numbers_in_any_familys_sampling_fields_sample_safely(
    family: str, data: st.DataObject
) -> None:
    """The llm_sampling fuzz target's properties on documents built field by field: every numeric
    key a family reads (and do_sample), each holding any number."""
    keys = data.draw(st.lists(st.sampled_from(numeric_keys(family)), min_size=1, max_size=6))
    doc: dict[str, Any] = {key: data.draw(NUMBERS) for key in keys}
    if family in ("tgi", "triton", "mindie"):
        doc["do_sample"] = data.draw(st.booleans())
    llm_sampling.check(family.encode() + b"\n" + json.dumps(doc).encode())
