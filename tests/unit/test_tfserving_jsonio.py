"""Reading bodies as TF Serving does: NaN/Infinity tokens, trailing bytes, parse errors (a gzip
body is inflated before, by the transport)."""

from __future__ import annotations

import math
import random

import pytest

from rosettaserve.core.errors import InvalidInput
from rosettaserve.protocols.tfserving.jsonio import (
    load,
    load_object,
    mentions_bools,
    snippet,
    type_name,
)


def test_ordinary_bodies_parse_and_flag_possible_booleans() -> None:
    assert load(b'{"instances": [1.5, 2]}').doc == {"instances": [1.5, 2]}
    assert load(b'{"instances": [1.5, 2]}').maybe_bools is False
    assert load(b'{"instances": [true]}').maybe_bools is True


@pytest.mark.parametrize(
    ("token", "check"),
    [
        ("NaN", math.isnan),
        ("-NaN", math.isnan),
        ("Infinity", lambda v: v == math.inf),
        ("-Infinity", lambda v: v == -math.inf),
        ("Inf", lambda v: v == math.inf),
        ("-Inf", lambda v: v == -math.inf),
    ],
)
def test_non_finite_tokens_are_numbers(token: str, check: object) -> None:
    doc = load(f'{{"instances": [1.0, {token}]}}'.encode()).doc
    assert doc["instances"][0] == 1.0
    assert check(doc["instances"][1])  # type: ignore[operator]


def test_tokens_inside_strings_are_left_alone() -> None:
    doc = load(b'{"a": ["Inf", "say \\"NaN\\"", -Inf], "b": "-Inf"}').doc
    assert doc["a"][:2] == ["Inf", 'say "NaN"']
    assert doc["a"][2] == -math.inf
    assert doc["b"] == "-Inf"


@pytest.mark.parametrize("tail", [b" trailing", b"\x00", b"}{", b' {"more": 1}'])
def test_bytes_after_the_first_document_are_ignored(tail: bytes) -> None:
    assert load(b'{"instances": [1]}' + tail).doc == {"instances": [1]}
    assert load(b'{"instances": [NaN]}' + tail).doc["instances"][0] != 0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "JSON Parse error: The document is empty"),
        (b'{"instances": [1.]}', "JSON Parse error: Miss fraction part in number. at offset: 17"),
        (b'{"instances": [.5]}', "JSON Parse error:"),
        (b'{"instances": [1, 2}', "JSON Parse error:"),
        (b'{"instances" [1]}', "JSON Parse error: Missing a colon after a name of object member."),
        (b'{"instances": [Nan]}', "JSON Parse error:"),
        (b"\xff\xfe", "JSON Parse error:"),
        (b"[" * 100000, "JSON Parse error:"),
    ],
)
def test_parse_errors_read_as_tf_s(body: bytes, message: str) -> None:
    with pytest.raises(InvalidInput) as err:
        load(body)
    assert err.value.message.startswith(message)


def test_top_level_must_be_an_object() -> None:
    with pytest.raises(InvalidInput, match=r"^JSON Value: \[1,2\] Is not object$"):
        load_object(b"[1, 2]")


def test_values_in_messages() -> None:
    assert [type_name(v) for v in (None, True, False, {}, [], "", 1, 1.5)] == [
        "Null", "True", "False", "Object", "Array", "String", "Number", "Number",
    ]  # fmt: skip
    assert snippet(0.1) == "0.1"
    assert snippet(1.0) == "1.0"
    assert snippet(math.nan) == "NaN"
    assert snippet("a") == '"a"'
    assert snippet({"b64": 1}) == '{"b64":1}'
    assert len(snippet(list(range(10000)))) == 256


def test_the_boolean_scan_agrees_with_a_substring_search() -> None:
    rng = random.Random(1)
    samples = [b"true", b"false", b"[false]", b"tru", b"fals", b"", b"u", b"l", b"atrue"]
    samples += [
        bytes(rng.choice(b"truefals ") for _ in range(rng.randint(0, 12))) for _ in range(5000)
    ]
    for body in samples:
        assert mentions_bools(body) == (b"true" in body or b"false" in body), body
