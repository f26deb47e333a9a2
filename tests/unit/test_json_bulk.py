"""Large OIP JSON bodies: numeric arrays read in bulk give what the ordinary read gives."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import numpy as np
import orjson
import pytest

from rosettaserve.core import json_bulk
from rosettaserve.core.errors import InvalidInput
from rosettaserve.protocols.oip import convert

N = 20_000  # elements: a body well over json_bulk.MIN_BODY


def body(
    data: object, datatype: str = "FP32", shape: list[int] | None = None, **extra: object
) -> bytes:
    doc = {
        "inputs": [{"name": "x", "datatype": datatype, "shape": shape or [N], "data": data}],
        **extra,
    }
    return json.dumps(doc).encode()


def parse(raw: bytes) -> object:
    return convert.parse_infer(raw, None, "m", "")


def ordinary(raw: bytes, monkeypatch: pytest.MonkeyPatch) -> object:
    with monkeypatch.context() as m:
        m.setattr(json_bulk, "MIN_BODY", 1 << 40)
        return parse(raw)


def outcome(raw: bytes) -> tuple[str, object]:
    try:
        req = parse(raw)
    except InvalidInput as exc:
        return "error", exc.message
    tensor = req.inputs[0]  # type: ignore[attr-defined]
    return "ok", (tensor.data.dtype.str, tensor.data.shape, tensor.data.tobytes())


def test_a_large_float_array_is_read_in_bulk_and_exactly() -> None:
    values = np.random.default_rng(7).standard_normal(N)
    raw = body(values.tolist(), "FP64")
    assert json_bulk.loads(raw, b"data", convert._place_data) is not None  # the bulk path ran
    req = parse(raw)
    np.testing.assert_array_equal(req.inputs[0].data, values)


CASES: list[tuple[Callable[[int], list[object]], str]] = [
    (lambda n: list(range(-n // 2, n // 2)), "INT32"),
    (lambda n: list(range(n)), "FP32"),
    (lambda n: [2**63 + i for i in range(n)], "UINT64"),
    (lambda n: [-(2**63)] * n, "INT64"),
    (lambda n: [1.5] * n, "INT32"),  # numbers where integers are wanted
    (lambda n: [300] * n, "INT8"),  # out of range
    (lambda n: [1e300] * n, "FP32"),  # beyond FP32: refused
    (lambda n: [0.5] * (n - 1) + [-1e39], "FP32"),  # the last one beyond FP32
    (lambda n: [3.4028235e38] * n, "FP32"),  # FP32's largest as printed: kept
    (lambda n: [True] * n, "FP32"),  # booleans: not numbers
    (lambda n: [1.25] * (n - 1) + [None], "FP32"),
    (lambda n: ["1"] * n, "FP32"),
    (lambda n: [1.0] * n, "BYTES"),
    (lambda n: [0.5] * (n - 1), "FP32"),  # one element short
    (lambda n: [0.1 + i / 7 for i in range(n)], "FP32"),  # numbers as clients widen float32
    (lambda n: [float(np.float32(i / 7)) for i in range(n)], "FP32"),
    (lambda n: [i - n / 2 for i in range(n)], "FP64"),  # integers and halves
    (lambda n: [2**62 + i for i in range(n - 1)] + [0.5], "FP64"),  # a float after big integers
]


# 250: within the ordinary path's short lists (codec.SMALL_LIST), which it checks its own way
@pytest.mark.parametrize("reader", ["json_numbers", "simdjson"])
@pytest.mark.parametrize("n", [250, N])
@pytest.mark.parametrize(("make", "datatype"), CASES)
def test_bulk_and_ordinary_reads_agree(
    make: Callable[[int], list[object]],
    datatype: str,
    n: int,
    reader: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the C reader, and with simdjson alone (what runs where the C reader is not built)."""
    assert json_bulk.json_numbers is not None  # built (make native): the first reader is tried
    if reader == "simdjson":
        monkeypatch.setattr(json_bulk, "json_numbers", None)
    data = make(n)
    assert len(json.dumps(data)) >= json_bulk.MIN_ARRAY  # long enough for a bulk read
    raw = body(data, datatype, shape=[n])
    bulk = outcome(raw)
    with monkeypatch.context() as m:
        m.setattr(json_bulk, "MIN_BODY", 1 << 40)
        plain = outcome(raw)
    assert bulk[0] == plain[0]
    if bulk[0] == "ok":
        assert bulk == plain


def test_an_array_of_a_kilobyte_is_read_in_bulk() -> None:
    """The bulk read starts at MIN_ARRAY bytes of array text, well below a large body."""
    values = [0.1 + i / 7 for i in range(64)]  # ~1.3 KB of text
    raw = body(values, shape=[64])
    assert len(orjson.dumps(values)) >= json_bulk.MIN_ARRAY
    assert json_bulk.loads(raw, b"data", convert._place_data) is not None
    np.testing.assert_array_equal(parse(raw).inputs[0].data, np.float32(values))  # type: ignore[attr-defined]
    short = body(values[:8], shape=[8])
    assert json_bulk.loads(short, b"data", convert._place_data) is None


def test_nested_and_ragged_data_take_the_ordinary_path() -> None:
    rows = [[float(i)] * 100 for i in range(N // 100)]
    req = parse(body(rows, shape=[N // 100, 100]))
    assert req.inputs[0].data.shape == (N // 100, 100)
    rows[3] = [*rows[3][:-1], [1.0]]  # ragged: a list where a number belongs
    with pytest.raises(InvalidInput, match="ragged"):
        parse(body(rows, shape=[N // 100, 100]))


def test_a_list_after_the_first_number_takes_the_ordinary_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The search stops at the first "]" without looking for a "[" before it: the span it gives
    for "[0.5, ..., [1.0, 2.0], ...]" is not a flat array, the reader declines it, and the body
    is read the ordinary way, with the ordinary outcome."""
    values: list[object] = [0.5] * (N - 1)
    values[N // 2] = [1.0, 2.0]
    raw = body(values, shape=[N - 1])
    spans = json_bulk.find_arrays(raw, b"data")
    assert len(spans) == 1
    assert b"[1.0, 2.0]" in raw[spans[0][0] : spans[0][1] + 1]
    assert json_bulk.loads(raw, b"data", convert._place_data) is None
    assert outcome(raw) == ("error", ordinary_message(raw, monkeypatch))
    nested_last = body([*([0.5] * (N - 1)), [1.0]], shape=[N])
    assert json_bulk.loads(nested_last, b"data", convert._place_data) is None
    assert outcome(nested_last) == ("error", ordinary_message(nested_last, monkeypatch))


def ordinary_message(raw: bytes, monkeypatch: pytest.MonkeyPatch) -> str:
    with pytest.raises(InvalidInput) as caught:
        ordinary(raw, monkeypatch)
    return caught.value.message


def test_a_data_key_elsewhere_is_left_alone() -> None:
    """A numeric list under "data" in the request parameters stays a list of numbers."""
    raw = body([0.25] * N, parameters={"data": list(range(N))})
    req = parse(raw)
    assert req.parameters["data"] == list(range(N))
    assert req.inputs[0].data.dtype == np.float32


def test_data_text_inside_a_string_does_not_confuse_it() -> None:
    sneaky = '"data": [' + ",".join(["1"] * 2000) + "]"
    raw = body([0.5] * N, parameters={"note": sneaky})
    req = parse(raw)
    assert req.parameters["note"] == sneaky
    assert float(req.inputs[0].data[0]) == 0.5


def test_a_forged_marker_is_not_trusted() -> None:
    forged = {json_bulk.MARK: 0}
    raw = orjson.dumps(
        {
            "inputs": [
                {"name": "x", "datatype": "FP32", "shape": [N], "data": [0.5] * N},
                {"name": "y", "datatype": "FP32", "shape": [1], "data": forged},
            ]
        }
    )
    doc = json_bulk.loads(raw, b"data", convert._place_data)
    assert doc is not None
    assert doc["inputs"][1]["data"] == forged  # the array went where the real marker stood
    with pytest.raises(InvalidInput, match="must hold JSON numbers, got dict"):
        parse(raw)


def test_malformed_large_json_is_still_a_clear_error() -> None:
    raw = body([0.5] * N)[:-3]
    with pytest.raises(InvalidInput, match="not valid JSON"):
        parse(raw)


def test_string_data_is_not_tried_in_bulk() -> None:
    """BYTES data is strings: no bulk read is attempted for it, while a numeric array beside it
    still is, and both inputs come out as the ordinary read gives them."""
    words = ["some text of twenty"] * 100  # 2.3 KB of array text
    numbers = [0.1 + i / 7 for i in range(100)]
    raw = orjson.dumps(
        {
            "inputs": [
                {"name": "w", "datatype": "BYTES", "shape": [100], "data": words},
                {"name": "x", "datatype": "FP32", "shape": [100], "data": numbers},
            ]
        }
    )
    spans = json_bulk.find_arrays(raw, b"data")
    assert len(spans) == 1
    assert raw[spans[0][0] : spans[0][0] + 4] == b"[0.1"
    assert json_bulk.find_arrays(bytearray(raw), b"data") == spans  # a body read into a buffer
    req = parse(raw)
    assert req.inputs[0].data.tolist() == [w.encode() for w in words]  # type: ignore[attr-defined]
    np.testing.assert_array_equal(req.inputs[1].data, np.float32(numbers))  # type: ignore[attr-defined]
    assert json_bulk.find_arrays(body(words, "BYTES", shape=[100]), b"data") == []


def _search_bodies(rng: random.Random) -> list[bytes]:
    """Bodies for the array search: keys quoted or not, blanks, colons, brackets and numbers cut
    and shuffled around real arrays (some nested, unclosed, too short or not numeric)."""
    long = ", ".join(repr(rng.random()) for _ in range(80))
    pieces = [
        '"data"', '"data" ', "data", '"dat"', ":", " : ", "[", "]", "[[", "-", "0", " ", "\n",
        ",", '"x"', "{", "}", "[" + long + "]", " [ " + long + "]", "[" + long, "[-" + long + "]",
        '["a", ' + long + "]", "[1, [" + long + "]]", "[" + long[:200] + "]",
    ]  # fmt: skip
    arrays = [p for p in pieces if long[:200] in p]
    bodies = []
    for _ in range(3000):
        parts = []
        for _ in range(rng.randint(1, 6)):
            if rng.random() < 0.5:  # a key and an array, maybe with blanks, maybe broken
                parts += ['"data"', rng.choice(["", " ", "\n"]), rng.choice([":", " :", ""])]
                parts += [rng.choice(["", " ", "\t"]), rng.choice(arrays)]
            parts += rng.choices(pieces, k=rng.randint(0, 3))
        bodies.append("".join(parts).encode())
    return bodies


def test_the_c_search_finds_the_same_arrays_as_the_python_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """json_numbers.find (C) against find_arrays' Python, its reference where it is not built."""
    c_reader = json_bulk.json_numbers
    assert c_reader is not None  # built: find_arrays uses the C search
    rng = random.Random(3)
    cases = _search_bodies(rng)
    found = [c_reader.find(raw, b"data", json_bulk.MIN_ARRAY) for raw in cases]
    assert sum(map(len, found)) > 500  # many bodies hold a span: the comparison is not empty
    monkeypatch.setattr(json_bulk, "json_numbers", None)
    for raw, spans in zip(cases, found, strict=True):
        assert json_bulk.find_arrays(raw, b"data") == spans, raw
        assert json_bulk.find_arrays(bytearray(raw), b"data") == spans, raw
