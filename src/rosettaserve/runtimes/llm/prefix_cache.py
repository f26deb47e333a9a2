"""Automatic prefix caching: the KV cache of prompt prefixes, reused across requests.

Prompts are cut into blocks of ``block`` tokens. A block is known by a digest of its tokens and
of the digest of the block before it, so one digest names the whole prefix up to that block's
end (vLLM's automatic prefix caching hashes blocks the same way). A request whose prompt starts
with cached blocks (a chat's system prompt, a shared few-shot preamble) starts its prefill after
them. The cache holds at most ``capacity`` tokens; the least recently used blocks go first, the
last blocks of a prefix before its first ones (a prefix's blocks are touched from its end back
to its start), so what stays is always reachable from the start of a prompt.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict

import torch

from rosettaserve.runtimes.llm.batch import KV


class PrefixCache:
    def __init__(self, capacity: int, block: int) -> None:
        self.capacity = capacity - capacity % block if block > 0 else 0  # whole blocks only
        self.block = block
        self._blocks: OrderedDict[bytes, KV] = OrderedDict()  # digest -> that block's KV

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    @property
    def tokens(self) -> int:
        return len(self._blocks) * self.block

    def digests(self, tokens: list[int], count: int) -> list[bytes]:
        """The digest of each whole block in ``tokens[:count]`` (none if the cache is off)."""
        out: list[bytes] = []
        if not self.enabled:
            return out
        parent = b""
        for start in range(0, count - self.block + 1, self.block):
            data = array("q", tokens[start : start + self.block]).tobytes()
            parent = hashlib.blake2b(parent + data, digest_size=16).digest()
            out.append(parent)
        return out

    def lookup(self, digests: list[bytes]) -> tuple[int, KV | None]:
        """The longest cached prefix of the blocks named by ``digests`` (see ``digests``): its
        length and its KV (one ``[1, kv_heads, length, head_dim]`` pair per layer)."""
        found: list[bytes] = []
        for digest in digests:
            if digest not in self._blocks:
                break
            found.append(digest)
        if not found:
            return 0, None
        for digest in reversed(found):  # the first block ends up the most recently used
            self._blocks.move_to_end(digest)
        blocks = [self._blocks[d] for d in found]
        kv = [
            (
                torch.cat([b[layer][0] for b in blocks], dim=2),
                torch.cat([b[layer][1] for b in blocks], dim=2),
            )
            for layer in range(len(blocks[0]))
        ]
        return len(found) * self.block, kv

    def held(self, digests: list[bytes]) -> int:
        """How many of ``digests``, from the first, name blocks the cache holds now; unlike
        ``lookup`` it touches nothing (a report of the contents must not keep them alive).
        Safe from another thread: each membership test is one dict operation."""
        count = 0
        for digest in digests:
            if digest not in self._blocks:
                break
            count += 1
        return count

    def insert(self, tokens: list[int], kv: KV, count: int) -> None:
        """Keep the KV of the whole blocks of ``tokens[:count]`` (``kv`` covers at least them)."""
        if not self.enabled:
            return
        digests = self.digests(tokens, min(count, self.capacity))
        for i in reversed(range(len(digests))):
            digest = digests[i]
            if digest in self._blocks:
                self._blocks.move_to_end(digest)
                continue
            at = slice(i * self.block, (i + 1) * self.block)
            self._blocks[digest] = [
                (k[:, :, at].clone(), v[:, :, at].clone()) for k, v in kv
            ]  # a copy: the block must not hold a whole sequence's cache alive
        while self.tokens > self.capacity:
            self._blocks.popitem(last=False)

    def clear(self) -> None:
        self._blocks.clear()
