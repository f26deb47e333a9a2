"""The most characters of a prompt one token stands for (runtimes/llm/prompt_bound.py): derived
from the tokenizer's pieces, and honest -- a text of N characters never tokenizes to fewer than
ceil(N / bound) tokens, so no prompt that would fit the window is refused unheard. Tokenizers
with pieces that drop text (or truncate) give no bound."""

from __future__ import annotations

import math
import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from rosettaserve.runtimes.llm.detok import encoder
from rosettaserve.runtimes.llm.prompt_bound import (
    COMPOSED_MAX,
    byte_level_alphabet,
    chars_per_token,
    max_prompt_chars,
)

MODEL = Path(__file__).resolve().parents[2] / "examples" / "models" / "tiny_llama"
CORPUS = (MODEL.parents[2] / "examples" / "llm" / "corpus.txt").read_text()[:20000]
GREEK = "\u1f82"  # decomposes into four code points (NFD), which NFC composes back into one


def test_composition_absorbs_at_most_composed_max_code_points() -> None:
    longest = max(len(unicodedata.normalize("NFD", chr(c))) for c in range(sys.maxunicode + 1))
    assert longest == COMPOSED_MAX == len(unicodedata.normalize("NFD", GREEK))


def test_the_byte_level_alphabet_is_the_tokenizers_own() -> None:
    assert sorted(byte_level_alphabet()) == sorted(pre_tokenizers.ByteLevel.alphabet())
    assert len(set(byte_level_alphabet())) == 256


@pytest.fixture(scope="module")
def tiny() -> Any:
    return AutoTokenizer.from_pretrained(MODEL, local_files_only=True)


def test_the_example_llama_s_bound_is_its_longest_token(tiny: Any) -> None:
    longest = max(len(t) for t in tiny.backend_tokenizer.get_vocab(with_added_tokens=True))
    assert chars_per_token(tiny) == longest == len("<|endoftext|>")
    assert max_prompt_chars(tiny, 512) == 511 * longest


def byte_level(normalizer: Any = None, pre: Any = None, model: str = "BPE") -> Any:
    """A small byte-level tokenizer trained on the example corpus, behind transformers."""
    if model == "BPE":
        tok = Tokenizer(models.BPE())
        trainer: Any = trainers.BpeTrainer(
            vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        )
    else:
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        trainer = trainers.WordPieceTrainer(vocab_size=400, special_tokens=["[UNK]"])
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre or pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([CORPUS], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def byte_fallback(normalizer: Any, fallback: bool = True) -> Any:
    """A SentencePiece-like BPE: Metaspace, and every byte as a <0xNN> token (or not)."""
    tok = Tokenizer(models.BPE(byte_fallback=fallback, unk_token=None if fallback else "<unk>"))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    bytes_tokens = [f"<0x{b:02X}>" for b in range(256)] if fallback else ["<unk>"]
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=bytes_tokens)
    tok.train_from_iterator([CORPUS], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def longest_token(tokenizer: Any) -> int:
    return max(len(t) for t in tokenizer.backend_tokenizer.get_vocab(with_added_tokens=True))


@pytest.fixture(scope="module")
def nfc() -> Any:
    return byte_level(normalizers.NFC())


def test_a_composing_normalizer_multiplies_the_bound(nfc: Any) -> None:
    assert chars_per_token(nfc) == COMPOSED_MAX * longest_token(nfc)
    halving = byte_level(normalizers.Replace("  ", " "))
    assert chars_per_token(halving) == 2 * longest_token(halving)
    kept = byte_level(normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase()]))
    assert chars_per_token(kept) == longest_token(kept)


@pytest.mark.parametrize(
    "make",
    [
        lambda: byte_level(normalizers.Strip()),  # drops spaces
        lambda: byte_level(normalizers.StripAccents()),  # drops combining marks
        lambda: byte_level(normalizers.BertNormalizer()),  # drops control characters
        lambda: byte_level(normalizers.Replace(" ", "")),  # replaces with nothing
        lambda: byte_level(pre=pre_tokenizers.Whitespace()),  # drops whitespace
        lambda: byte_level(pre=pre_tokenizers.Split(" ", behavior="removed")),
        lambda: byte_level(model="WordPiece"),  # a whole unknown word is one [UNK]
        lambda: byte_fallback(None, fallback=False),  # unknown characters fused into <unk>
    ],
    ids=[
        "strip",
        "strip-accents",
        "bert",
        "replace-by-nothing",
        "whitespace",
        "split-removed",
        "wordpiece",
        "no-byte-fallback",
    ],
)
def test_pieces_that_drop_text_give_no_bound(make: Any) -> None:
    assert chars_per_token(make()) is None


def test_truncation_gives_no_bound(tiny: Any) -> None:
    truncating = AutoTokenizer.from_pretrained(MODEL, local_files_only=True)
    truncating.backend_tokenizer.enable_truncation(16)
    assert chars_per_token(truncating) is None
    assert max_prompt_chars(truncating, 512) == 0  # 0: no bound, the prompt is tokenized


def test_byte_fallback_gives_a_bound() -> None:
    tokenizer = byte_fallback(normalizers.NFKC())
    assert chars_per_token(tokenizer) == COMPOSED_MAX * longest_token(tokenizer)


def at_least_the_bound(tokenizer: Any, text: str) -> None:
    bound = chars_per_token(tokenizer)
    assert bound is not None
    ids = encoder(tokenizer)(text, False)
    assert len(ids) >= math.ceil(len(text) / bound), (len(ids), len(text), bound)


def hostile_texts(tokenizer: Any) -> st.SearchStrategy[str]:
    """Texts made of what shortens a tokenization most: the longest tokens, decomposed
    characters a normalizer composes, runs of spaces, plus anything at all."""
    vocab = sorted(tokenizer.backend_tokenizer.get_vocab(), key=len)[-20:]
    texts = [tokenizer.decode(tokenizer.convert_tokens_to_ids([t])) for t in vocab]
    pieces = st.sampled_from(
        [*texts, unicodedata.normalize("NFD", GREEK), "  ", "\u1100\u1161\u11a8"]
    )
    return st.lists(st.one_of(pieces, st.text(max_size=8)), max_size=40).map("".join)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_no_text_has_fewer_tokens_than_the_bound_says(data: st.DataObject) -> None:
    tokenizer = data.draw(st.sampled_from(TOKENIZERS))
    at_least_the_bound(tokenizer, data.draw(hostile_texts(tokenizer)))


def test_the_worst_texts_meet_the_bound(tiny: Any, nfc: Any) -> None:
    for tokenizer in (tiny, nfc):
        for token in sorted(tokenizer.backend_tokenizer.get_vocab(), key=len)[-5:]:
            text = tokenizer.decode(tokenizer.convert_tokens_to_ids([token]))
            at_least_the_bound(tokenizer, text * 50)
    at_least_the_bound(nfc, unicodedata.normalize("NFD", GREEK) * 300)


def test_without_the_composing_factor_a_fitting_prompt_would_be_refused() -> None:
    """A vocabulary whose longest token is one composed character (3 bytes): the decomposed
    text, 4 code points a character, has a token per 4 characters, more than the longest
    token holds; the factor covers it."""
    tok = Tokenizer(models.BPE())
    trainer = trainers.BpeTrainer(
        vocab_size=258, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.train_from_iterator([GREEK * 100], trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok)
    assert longest_token(tokenizer) == len(GREEK.encode()) == 3
    text = unicodedata.normalize("NFD", GREEK) * 10
    ids = encoder(tokenizer)(text, False)
    assert len(text) / len(ids) == COMPOSED_MAX > longest_token(tokenizer)
    assert chars_per_token(tokenizer) == COMPOSED_MAX * 3
    at_least_the_bound(tokenizer, text)


TOKENIZERS = [
    AutoTokenizer.from_pretrained(MODEL, local_files_only=True),
    byte_level(normalizers.NFC()),
    byte_level(normalizers.Replace("  ", " ")),
    byte_fallback(normalizers.NFKC()),
]
