"""core/errors.py: every message a client is sent is bounded, whatever raised it."""

from __future__ import annotations

import re

import pytest

from rosettaserve.core.errors import (
    MAX_MESSAGE_BYTES,
    InvalidInput,
    ModelError,
    bounded,
    served_as,
)

MARKER = re.compile(r"… \((\d+) more characters\)$")


@pytest.mark.parametrize("text", ["", "short", "x" * MAX_MESSAGE_BYTES, "é" * 1024])
def test_a_message_within_the_bound_is_kept_whole(text: str) -> None:
    assert bounded(text) == text


@pytest.mark.parametrize(
    "text",
    ["x" * 5_000_000, "é" * (MAX_MESSAGE_BYTES // 2 + 1), "ab😀" * 1000, "x" * 2047 + "😀"],
    ids=["5 MB ascii", "two-byte characters", "four-byte characters", "cut inside one"],
)
def test_a_longer_message_is_cut_on_a_character_and_says_how_much_is_left(text: str) -> None:
    out = bounded(text)
    marker = MARKER.search(out)
    assert marker is not None
    head = out[: marker.start()]
    assert len(head.encode()) <= MAX_MESSAGE_BYTES
    assert text.startswith(head)
    assert len(head) + int(marker.group(1)) == len(text)


def test_every_serving_error_is_bounded_the_model_s_exceptions_too() -> None:
    huge = "y" * 5_000_000
    for error in (
        InvalidInput(huge),
        ModelError(huge),
        served_as(RuntimeError(huge)),
        served_as(ValueError(huge)),
    ):
        assert error is not None
        assert len(error.message.encode()) < MAX_MESSAGE_BYTES + 64
        assert str(error) == error.message
