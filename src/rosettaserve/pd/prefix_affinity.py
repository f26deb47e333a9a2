"""Cache-aware choice of the prefill instance: requests that share a prompt prefix go where that
prefix was prefilled before (its prefix cache holds it), balanced against the instances' load.

The scheduler cannot tokenize (it has no model), so a prompt is approximated by its text: the
request's prompt field as the family names it (``messages`` for chat: their JSON, so the turns
of a conversation share the text of the turns before), cut in blocks of ``BLOCK`` characters,
each block's hash chained with the hashes before it (a block matches only with everything before
it). The table remembers, for each chained hash, the instance that last prefilled it (bounded,
least recently used first out).

That table is a guess: an instance's prefix cache evicts, and a restarted one holds nothing. A
prefill instance therefore reports which of these hashes its cache holds now (prefix_report.py,
read off its status by the pool); an instance's report replaces what the table believed of it:
for that instance a hash counts when the report has it, or when the table gave it to the
instance after the report was asked for (a request sent since, which the next report covers).
An instance that reports nothing keeps the table's guess.

Choice: the instance with the least expected prefill work, ``outstanding`` (the request bytes it
has not answered yet: the work queued before this one) plus the characters of this prompt it does
not hold. A cached prefix thus wins until the instance holding it is busier than the prefix is
worth; with nothing cached anywhere this is the load policy's choice.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

import orjson

from rosettaserve.protocols import families

BLOCK = 256  # characters a block (a few dozen tokens)
DIGEST = 12  # bytes of a block's chained hash
MAX_ENTRIES = 200_000  # chained hashes remembered (~30 MB at most)
MAX_TEXT = 1 << 22  # characters of a prompt looked at (a longer one: its head)


class Loaded(Protocol):
    @property
    def url(self) -> str: ...

    @property
    def outstanding(self) -> int: ...


def prompt_blocks(path: str, body: bytes | bytearray) -> list[bytes]:
    """The chained hashes of the prompt's blocks ([]: no prompt this can read)."""
    field = families.text_field(path, body) or "prompt"
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return []
    value: Any = doc.get(field) if isinstance(doc, dict) else None
    if isinstance(value, str):
        text = value.encode("utf-8", "replace")
    elif isinstance(value, list | dict):
        text = orjson.dumps(value)
    else:
        return []
    text = text[:MAX_TEXT]
    chained, digest = [], b""
    for start in range(0, len(text) - BLOCK + 1, BLOCK):  # (a last partial block: not cached)
        digest = hashlib.blake2b(digest + text[start : start + BLOCK], digest_size=DIGEST).digest()
        chained.append(digest)
    return chained


L = TypeVar("L", bound=Loaded)


class PrefixTable:
    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._where: OrderedDict[bytes, tuple[str, int]] = OrderedDict()  # -> (URL, stamp)
        self._reports: dict[str, tuple[int, frozenset[bytes]]] = {}  # URL -> (stamp, held)
        self.stamp = 0  # prompts remembered so far: when a table entry or a report was made
        self.max_entries = max_entries
        self.hits = 0  # requests sent where a prefix of theirs was
        self.matched_chars = 0  # the characters of those prefixes

    def matched(self, blocks: Sequence[bytes]) -> dict[str, int]:
        """Instance URL -> the characters of the longest prefix it holds."""
        held: dict[str, int] = {}
        for i, digest in enumerate(blocks):
            entry = self._where.get(digest)
            if entry is not None:
                url, stamp = entry
                report = self._reports.get(url)
                if report is None or stamp > report[0]:  # (not older than its report)
                    held[url] = (i + 1) * BLOCK  # (chained: a match means all before it too)
        for url, (_, digests) in self._reports.items():
            last = max((i + 1 for i, digest in enumerate(blocks) if digest in digests), default=0)
            if last * BLOCK > held.get(url, 0):
                held[url] = last * BLOCK
        return held

    def choose(self, candidates: Sequence[L], blocks: Sequence[bytes]) -> L:
        """The candidate with the least expected prefill work (candidates in the order ties go)."""
        held = self.matched(blocks) if blocks else {}
        length = len(blocks) * BLOCK

        def work(instance: L) -> int:
            return instance.outstanding + length - held.get(instance.url, 0)

        chosen = min(candidates, key=work)
        if held.get(chosen.url):
            self.hits += 1
            self.matched_chars += held[chosen.url]
        return chosen

    def remember(self, blocks: Sequence[bytes], url: str) -> None:
        """``url`` prefilled these blocks (its cache now holds them)."""
        self.stamp += 1
        for digest in blocks:
            self._where[digest] = (url, self.stamp)
            self._where.move_to_end(digest)
        while len(self._where) > self.max_entries:
            self._where.popitem(last=False)

    def report(self, url: str, held: frozenset[bytes] | None, stamp: int) -> None:
        """What ``url`` reported its cache holds (None: it reports nothing), asked for when
        ``stamp`` was the table's: it replaces the table's entries for ``url`` up to then."""
        if held is None:
            self._reports.pop(url, None)
        else:
            self._reports[url] = (stamp, held)
