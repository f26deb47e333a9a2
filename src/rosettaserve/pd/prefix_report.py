"""What a prefill instance's prefix cache holds, in the scheduler's terms (its report), and the
scheduler's reading of that report.

The scheduler names a prompt's prefixes by the chained hashes of its text blocks
(prefix_affinity.py); the engine names them by the chained digests of its token blocks
(runtimes/llm/prefix_cache.py). For each prompt it prefilled, this instance keeps both lists
and the prompt's token count; a report is computed from what the engine's cache holds *now*,
not from a log of insertions and evictions: for each prompt, the count ``k`` of its leading
token blocks still in the cache (``PrefixHolder.held``, which touches nothing), and the text
blocks that cover the same share of the prompt (``len(text) * k * block // tokens``, rounded
down: text and tokens are assumed spread evenly over each other, the one approximation left,
and one that never claims more than the share held). So an eviction, a ``clear`` (a model
unloaded) or a restart shows in the next report with no hook in the cache, and a prompt none of
whose blocks is held any more is forgotten then.

Bounds: the last ``MAX_PROMPTS`` prompts are kept, ``MAX_KEPT`` hashes and digests for all of
them (a prompt's text blocks past what its cacheable tokens cover are not kept: they are never
reported); a report carries at most ``MAX_REPORT`` hashes (the newest prompts' first), as one
base64 string of 12-byte hashes in the status's ``prefill.prefixBlocks``. An instance reports
only when each of its engines has a prefix cache it can read (else it says nothing, and the
scheduler keeps its own table for it), and only to a peer (pd/instance.py): the hashes let
whoever guesses a prompt's text check that it was served.
"""

from __future__ import annotations

import base64
import binascii
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from rosettaserve.core.pd_engine import PrefixHolder
from rosettaserve.pd.prefix_affinity import DIGEST, prompt_blocks

MAX_PROMPTS = 1024  # prompts whose blocks are kept
MAX_REPORT = 4096  # hashes a report carries (48 KiB, 64 KiB in base64)
MAX_KEPT = 1 << 17  # hashes and digests kept for all prompts together (~8 MB)
FIELD = "prefixBlocks"  # the report's key in the status's "prefill" part


@dataclass
class Prompt:
    text: list[bytes]  # its text blocks' chained hashes (the scheduler's), those it may report
    whole: int  # its text blocks, all of them
    blocks: list[bytes]  # its token blocks' digests (the engine's), those the cache may keep
    tokens: int  # its token count
    cache: PrefixHolder  # the engine's cache (not the engine: an unloaded model is let go)

    def share(self, held: int) -> int:
        """The text blocks that cover the share of the prompt its first ``held`` blocks do."""
        return min(len(self.text), self.whole * held * self.cache.block // self.tokens)


class HeldPrefixes:
    def __init__(self, max_prompts: int = MAX_PROMPTS, max_kept: int = MAX_KEPT) -> None:
        self._prompts: OrderedDict[bytes, Prompt] = OrderedDict()  # by last text hash
        self.max_prompts, self.max_kept = max_prompts, max_kept
        self.kept = 0  # hashes and digests kept, all prompts together

    def __len__(self) -> int:
        return len(self._prompts)

    def record(
        self, path: str, body: bytes | bytearray, ids: list[int], cache: PrefixHolder
    ) -> None:
        """The prompt of this request body was prefilled as ``ids`` by the engine of ``cache``
        (which keeps its whole blocks, up to its capacity)."""
        text = prompt_blocks(path, body)
        if not text or not ids or cache.capacity <= 0:
            return
        blocks = cache.digests(ids, min(len(ids), cache.capacity))[:MAX_REPORT]
        prompt = Prompt(text, len(text), blocks, len(ids), cache)
        prompt.text = text[: prompt.share(len(blocks))]  # (the rest is never held)
        if not prompt.text:
            return
        self._drop(text[-1])
        self._prompts[text[-1]] = prompt
        self.kept += len(prompt.text) + len(blocks)
        while len(self._prompts) > self.max_prompts or self.kept > self.max_kept:
            self._drop(next(iter(self._prompts)))

    def _drop(self, key: bytes) -> None:
        prompt = self._prompts.pop(key, None)
        if prompt is not None:
            self.kept -= len(prompt.text) + len(prompt.blocks)

    def held(self, limit: int = MAX_REPORT) -> list[bytes]:
        """The text hashes whose prefix the caches hold now, the newest prompts' first."""
        out: dict[bytes, None] = {}  # (ordered, without repeats: prompts share prefixes)
        for key, prompt in reversed(list(self._prompts.items())):
            k = prompt.cache.held(prompt.blocks)
            if k == 0:
                self._drop(key)  # evicted whole: forgotten
                continue
            for digest in prompt.text[: prompt.share(k)]:
                if len(out) == limit:
                    break
                out[digest] = None
        return list(out)

    def report(self) -> str:
        return base64.b64encode(b"".join(self.held())).decode("ascii")


def read_report(doc: Any) -> frozenset[bytes] | None:
    """The hashes a status document (any JSON value) reports held; None when it reports none
    or the report is malformed (too long, not base64, not whole hashes)."""
    part = doc.get("prefill") if isinstance(doc, dict) else None
    value = part.get(FIELD) if isinstance(part, dict) else None
    if not isinstance(value, str) or len(value) > 4 * (MAX_REPORT * DIGEST + 2) // 3:
        return None
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(raw) % DIGEST:
        return None
    return frozenset(raw[i : i + DIGEST] for i in range(0, len(raw), DIGEST))
