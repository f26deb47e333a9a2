"""Incremental detokenization and stop strings."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from rosettaserve.runtimes.llm.detok import (
    LONG_TEXT_CHARS,
    IncrementalDetokenizer,
    StopText,
    decoder,
    encoder,
)

MODEL = Path(__file__).resolve().parents[2] / "examples" / "models" / "tiny_llama"
TEXTS = ["漢字テスト 😀🚀 ñandú — naïve", "你好，世界。", "plain ascii words", "Ωμέγα ☕ 🙂"]  # noqa: RUF001


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    return AutoTokenizer.from_pretrained(MODEL, local_files_only=True)


@pytest.mark.parametrize("text", TEXTS)
def test_pieces_are_whole_characters_and_add_up_to_the_text(tokenizer, text: str) -> None:  # type: ignore[no-untyped-def]
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    detok = IncrementalDetokenizer(decoder(tokenizer, True), tokenizer("Hello:")["input_ids"])
    pieces = [detok.push(i) for i in ids]
    pieces.append(detok.flush())
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) == text == tokenizer.decode(ids)


def test_characters_split_over_tokens_wait_for_their_last_byte(tokenizer) -> None:  # type: ignore[no-untyped-def]
    ids = tokenizer("漢😀", add_special_tokens=False)["input_ids"]
    assert len(ids) > 2  # unseen characters: the byte-level tokens split them
    detok = IncrementalDetokenizer(decoder(tokenizer, True), [])
    pieces = [detok.push(i) for i in ids]
    assert "" in pieces
    assert [p for p in pieces if p] == ["漢", "😀"]


def test_an_unfinished_character_is_flushed_at_the_end(tokenizer) -> None:  # type: ignore[no-untyped-def]
    ids = tokenizer("😀", add_special_tokens=False)["input_ids"]
    detok = IncrementalDetokenizer(decoder(tokenizer, True), [])
    assert [detok.push(i) for i in ids[:-1]] == [""] * (len(ids) - 1)
    assert detok.flush() == tokenizer.decode(ids[:-1])  # what decode gives: U+FFFD


def push_all(stop: StopText, pieces: list[str]) -> tuple[list[str], str | None]:
    out = []
    for piece in pieces:
        text, hit = stop.push(piece)
        out.append(text)
        if hit is not None:
            return out, hit
    out.append(stop.flush())
    return out, None


def test_a_stop_string_split_over_pieces_is_found_and_never_sent() -> None:
    out, hit = push_all(StopText(("STOP",), False), ["ab", "cS", "T", "OPde"])
    assert hit == "STOP"
    assert "".join(out) == "abc"
    assert all("S" not in piece for piece in out)


def test_the_earliest_stop_string_wins_and_may_be_kept() -> None:
    out, hit = push_all(StopText(("yz", "xy"), True), ["wxyz"])
    assert (hit, "".join(out)) == ("xy", "wxy")


def test_text_without_stop_strings_is_sent_whole() -> None:
    out, hit = push_all(StopText(("zzz",), False), ["hello ", "world", "z"])
    assert hit is None
    assert "".join(out) == "hello worldz"
    assert out[0] == "hell"  # the last two characters wait: they could start "zzz"
    out, _ = push_all(StopText((), False), ["a", "b"])
    assert out == ["a", "b", ""]


@pytest.mark.parametrize("special", [True, False])
def test_a_long_text_has_the_ids_of_a_short_one_s_way(tokenizer, special: bool) -> None:  # type: ignore[no-untyped-def]
    """Past LONG_TEXT_CHARS the encoder takes encode_batch (which lets go of the interpreter):
    the same ids as encode, special tokens in the text included."""
    encode = encoder(tokenizer)
    text = (" ".join(TEXTS) + " <|im_start|>user\n") * 40
    assert len(text) > LONG_TEXT_CHARS
    backend = tokenizer.backend_tokenizer
    assert encode(text, special) == backend.encode(text, add_special_tokens=special).ids
    assert encode(text, special) == tokenizer(text, add_special_tokens=special)["input_ids"]
