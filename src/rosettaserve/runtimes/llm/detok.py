"""Text of generated tokens as they come: complete characters only, stop strings held back;
and the prompt's way in (``encoder``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

REPLACEMENT = "\ufffd"
PROMPT_CONTEXT = 5  # prompt tokens decoded with the output, for tokenizers whose text needs context

# A longer text is tokenized by the Rust tokenizer's ``encode_batch``, which lets go of the
# interpreter while it works (its ``encode`` holds it throughout: a long prompt tokenized on
# another thread would still hold the event loop).
LONG_TEXT_CHARS = 512

Decode = Callable[[list[int]], str]
Encode = Callable[[str, bool], list[int]]


def encoder(tokenizer: Any) -> Encode:
    """Text -> token ids (the bool: add the tokenizer's special tokens), through the Rust
    tokenizer when calling the tokenizer would give the same ids: no truncation or padding set
    in it. Calling the tokenizer costs twice as much, paid by the event loop for each request."""
    backend: Any = getattr(tokenizer, "backend_tokenizer", None)
    usable = backend is not None and hasattr(backend, "encode_special_tokens")
    if not usable or backend.truncation is not None or backend.padding is not None:
        return lambda text, special: list(tokenizer(text, add_special_tokens=special)["input_ids"])
    split = bool(getattr(tokenizer, "split_special_tokens", False))

    def encode(text: str, special: bool) -> list[int]:
        if backend.encode_special_tokens != split:  # what calling the tokenizer sets
            backend.encode_special_tokens = split
        if len(text) > LONG_TEXT_CHARS:  # the same ids, the interpreter free meanwhile
            return list(backend.encode_batch([text], add_special_tokens=special)[0].ids)
        return list(backend.encode(text, add_special_tokens=special).ids)

    return encode


def decoder(tokenizer: Any, skip_special_tokens: bool) -> Decode:
    """Token ids -> text without cleanup, through the Rust tokenizer when there is one."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return lambda ids: str(backend.decode(ids, skip_special_tokens=skip_special_tokens))
    return lambda ids: str(
        tokenizer.decode(
            ids, skip_special_tokens=skip_special_tokens, clean_up_tokenization_spaces=False
        )
    )


class IncrementalDetokenizer:
    """Decodes a window of recent tokens; emits text once it no longer ends mid-character.

    A byte-level token can hold part of a UTF-8 character; decoding it alone yields U+FFFD.
    The window ``[prefix, read)`` is what was emitted last; text past it is emitted only when
    it does not end with U+FFFD, so a character split over tokens leaves in one piece.
    """

    def __init__(self, decode: Decode, prompt_ids: list[int]) -> None:
        self._decode = decode
        self._ids = list(prompt_ids[-PROMPT_CONTEXT:])
        self._prefix = 0
        self._read = len(self._ids)

    def push(self, token_id: int) -> str:
        self._ids.append(token_id)
        prefix_text = self._decode(self._ids[self._prefix : self._read])
        full_text = self._decode(self._ids[self._prefix :])
        if full_text.endswith(REPLACEMENT) or len(full_text) <= len(prefix_text):
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        return full_text[len(prefix_text) :]

    def flush(self) -> str:
        """What is still held (an unfinished character becomes U+FFFD): at the end only."""
        prefix_text = self._decode(self._ids[self._prefix : self._read])
        full_text = self._decode(self._ids[self._prefix :])
        self._prefix = self._read = len(self._ids)
        return full_text[len(prefix_text) :]


class StopText:
    """Output text with stop strings: holds back what could still become a stop string."""

    def __init__(self, stops: tuple[str, ...], include_stop: bool) -> None:
        self.stops = stops
        self.include_stop = include_stop
        self.hold = max((len(s) for s in stops), default=1) - 1
        self.text = ""
        self.sent = 0

    def push(self, new: str) -> tuple[str, str | None]:
        """The text safe to emit now, and the stop string if one was completed."""
        if not new:
            return "", None
        start = max(0, len(self.text) - self.hold)
        self.text += new
        if self.stops:
            hit = self._find(start)
            if hit is not None:
                index, stop = hit
                self.text = self.text[: index + (len(stop) if self.include_stop else 0)]
                return self.flush(), stop
        safe = len(self.text) - self.hold
        if safe <= self.sent:
            return "", None
        delta = self.text[self.sent : safe]
        self.sent = safe
        return delta, None

    def _find(self, start: int) -> tuple[int, str] | None:
        found = [(i, s) for s in self.stops if (i := self.text.find(s, start)) >= 0]
        return min(found, key=lambda hit: hit[0]) if found else None

    def flush(self) -> str:
        delta = self.text[self.sent :]
        self.sent = len(self.text)
        return delta


def eos_ids(model: Any, tokenizer: Any) -> set[int]:
    """The model's end-of-sequence token ids (its configs' and its tokenizer's)."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        value = getattr(source, "eos_token_id", None)
        if value is not None:
            ids.update(value if isinstance(value, list) else [value])
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids
