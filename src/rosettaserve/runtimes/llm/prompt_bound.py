"""How many characters of a prompt one token can stand for, at most: what lets a prompt that
cannot fit the context window be refused before it is tokenized.

A prompt of N characters has at least ceil(N / C) tokens when no token stands for more than C
of its characters. The tokenizer's pieces say what C is:
- the model (BPE or Unigram) covers every character it is given with tokens of its vocabulary:
  each of at most ``longest`` characters (the longest token text, added tokens included), given
  that nothing is left out: every byte has a token (byte-level vocabularies, or byte fallback);
  an unknown-token model (WordPiece, WordLevel, an unknown word fused into one token) gives no
  bound;
- byte-level tokens count bytes, and a character is at least one byte: still at most
  ``longest`` characters;
- the normalizer may shorten the text before that: by a known factor (NFC and NFKC compose at
  most ``COMPOSED_MAX`` code points into one; a Replace by a shorter string), or without a bound
  (Strip, StripAccents, the BERT and SentencePiece normalizers drop characters): no bound then;
- a pre-tokenizer that drops characters (Whitespace, BERT's, a Split that removes what it
  matches) gives no bound; the others keep every character;
- truncation set in the tokenizer makes any prompt fit: no bound.
So C = shrink x longest, and a prompt is refused unheard when N > (window - 1) x C (``None``:
this tokenizer gives no bound; such prompts are only ever tokenized off the event loop).
"""

from __future__ import annotations

import json
from typing import Any

# the most code points canonical composition (NFC, NFKC) makes one of: the longest canonical
# decomposition of any character (U+1F82: four), which is what a composed character absorbed;
# decomposition itself never shortens a text (tests/unit/test_llm_prompt_bound.py checks both)
COMPOSED_MAX = 4
_KEEPS_LENGTH = {"NFD", "NFKD", "Lowercase", "Prepend", "ByteLevel"}
_COMPOSES = {"NFC", "NFKC"}
_KEEPS_TEXT = {"ByteLevel", "Metaspace", "Digits", "UnicodeScripts"}
_SPLITTERS = {"Split", "Punctuation"}  # keep the text unless their behavior is "Removed"


def max_prompt_chars(tokenizer: Any, context: int) -> int:
    """The longest text prompt that may fit a window of ``context`` tokens (0: no bound)."""
    per_token = chars_per_token(tokenizer)
    return 0 if per_token is None else (context - 1) * per_token


def chars_per_token(tokenizer: Any) -> int | None:
    """The most characters of a prompt one token of ``tokenizer`` (a transformers tokenizer)
    stands for, or None when it gives no such bound."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or backend.truncation is not None:
        return None
    spec = json.loads(backend.to_str())
    shrink = _shrink(spec.get("normalizer"))
    pre = spec.get("pre_tokenizer")
    if shrink is None or not _keeps_text(pre):
        return None
    vocab = backend.get_vocab(with_added_tokens=True)
    if not _covers_every_byte(spec.get("model") or {}, pre, vocab):
        return None
    return shrink * max(len(token) for token in vocab)


def _shrink(normalizer: dict[str, Any] | None) -> int | None:
    """The factor by which ``normalizer`` may shorten a text, at most (None: unbounded)."""
    if normalizer is None:
        return 1
    kind = normalizer.get("type")
    if kind in _KEEPS_LENGTH:
        return 1
    if kind in _COMPOSES:
        return COMPOSED_MAX
    if kind == "Replace":
        pattern, content = normalizer.get("pattern") or {}, normalizer.get("content")
        if "String" not in pattern or not isinstance(content, str) or not content:
            return None  # a regex may match any length; an empty content drops characters
        return max(1, -(-len(pattern["String"]) // len(content)))
    if kind == "Sequence":
        factor = 1
        for part in normalizer.get("normalizers") or []:
            shrink = _shrink(part)
            if shrink is None:
                return None
            factor *= shrink
        return factor
    return None


def _keeps_text(pre: dict[str, Any] | None) -> bool:
    """Does the pre-tokenizer hand every character on to the model?"""
    if pre is None:
        return True
    kind = pre.get("type")
    if kind == "Sequence":
        return all(_keeps_text(part) for part in pre.get("pretokenizers") or [])
    if kind in _SPLITTERS:
        return pre.get("behavior") != "Removed"
    return kind in _KEEPS_TEXT


def _covers_every_byte(model: dict[str, Any], pre: dict[str, Any] | None, vocab: Any) -> bool:
    """Does the model give every input a token (no unknown text dropped or fused)?"""
    if model.get("type") not in ("BPE", "Unigram"):
        return False
    if model.get("byte_fallback"):
        return all(f"<0x{byte:02X}>" in vocab for byte in range(256))
    if _has_byte_level(pre):
        return all(char in vocab for char in byte_level_alphabet())
    return False


def byte_level_alphabet() -> list[str]:
    """The 256 characters byte-level tokenizers write bytes as (GPT-2's map: printable bytes as
    themselves, the others from U+0100 on), as tokenizers' ``ByteLevel.alphabet()``."""
    kept = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    moved = [byte for byte in range(256) if byte not in kept]
    return [chr(byte) for byte in kept] + [chr(0x100 + i) for i in range(len(moved))]


def _has_byte_level(pre: dict[str, Any] | None) -> bool:
    if pre is None:
        return False
    if pre.get("type") == "Sequence":
        return any(_has_byte_level(part) for part in pre.get("pretokenizers") or [])
    return pre.get("type") == "ByteLevel"
