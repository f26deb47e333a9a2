"""Triton's response cache (``response_cache: true`` in model.yaml, ``--cache-size BYTES``): a
model's answer kept for the next request that gives it the very same inputs.

A cached version's invoker is wrapped (``CachedInvoker``, outside its batcher): a hit answers
from the cache without queueing or running the model; a miss runs it and keeps a copy of what it
returned. What the model returned is cached, not a protocol's response, so the outputs a request
asks for (and their parameters) are chosen from it afresh, and every protocol shares the entry.

- The key is what the model is given, all of it: the version (its name, number and this load of
  it: a version loaded again starts with no entries), each input's name, dtype, shape and bytes,
  and the request's parameters (``predict(inputs, parameters)`` sees them). It is hashed
  (Python's SipHash over every byte, keyed at random per process), and a hit compares the whole
  key with the entry's, byte for byte: two requests never share an answer unless their inputs
  are identical, however their hashes collide.
- One LRU shared by every cached version, bounded by ``--cache-size`` in bytes: an entry counts
  the bytes of its key and of its answer, plus a fixed overhead; the least recently used entries
  go first, and an answer that alone exceeds the bound is not cached.
- An entry is a copy, made read-only: a model that later changes the arrays it returned (or
  returns a view of its inputs) cannot change what a hit answers.
- A small request of the OIP REST and gRPC infer routes is first looked for by its own bytes
  (``CachedInvoker.encoded``; protocols/oip/answer_tier.py says which requests, and why): the
  entry keeps the encoded answer, so a hit neither parses the request nor encodes the answer.
  Such an entry is one more entry of the same LRU, in the same byte budget, its key compared
  whole on a hit like any other; its key's parameters (``("encoded", ...)``) are never those
  of a tensor key (``frozen``'s ``("map", ...)``), so the two kinds never answer each other.
- Hits and misses are counted in the version's statistics (``cache_hit``, ``cache_miss``: count
  and ns, as Triton's statistics extension shows them) and in /metrics under Triton's names.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

import numpy as np

from rosettaserve.core import streaming
from rosettaserve.core.call import Call
from rosettaserve.core.executor import run_request_work
from rosettaserve.core.invoker import Invocable
from rosettaserve.core.model import Arrays
from rosettaserve.core.registry import Encoded, ModelVersion

# Answers larger than this are copied into the cache on the request-work threads (the event loop
# serves other requests meanwhile). A key is made on the loop: hashing its bytes holds the
# interpreter anyway (bench/response_cache_cost.py: 1 MiB of input, some 0.6 ms).
INLINE_BYTES = 64 * 1024
ENTRY_OVERHEAD = 256  # bytes an entry holds besides its tensors' bytes (its objects, its slot)
TENSOR_OVERHEAD = 128  # per input or output: its name, shape and array objects
ELEMENT_OVERHEAD = 41  # per BYTES element: a Python bytes object and its pointer
_LEN = struct.Struct("<Q")


class Scope:
    """One load of one version: entries of a version loaded again never answer the new load."""

    __slots__ = ("name", "version")

    def __init__(self, name: str, version: str) -> None:
        self.name, self.version = name, version


class Key:
    """What the model is given, as a dict key: its hash made once, and equal only to a key
    whose every part (every input byte) is equal, whatever the hashes say."""

    __slots__ = ("digest", "inputs", "parameters", "scope", "size")

    def __init__(
        self,
        scope: Scope,
        inputs: tuple[tuple[str, str, tuple[int, ...], bytes], ...],
        parameters: Any,
        size: int,
    ) -> None:
        self.scope, self.inputs, self.parameters, self.size = scope, inputs, parameters, size
        # Python's hash of the bytes (SipHash, keyed at random per process: no client can
        # make two requests collide on purpose); the bytes keep it, a compare does not redo it
        self.digest = hash((id(scope), parameters, inputs))

    def __hash__(self) -> int:
        return self.digest

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Key)
            and other.scope is self.scope
            and other.parameters == self.parameters
            and other.inputs == self.inputs  # every byte (memcmp), not the hash
        )


@dataclass(slots=True)
class Entry:
    key: Key
    answer: Any  # the model's arrays by name, or an encoded answer (an ``Encoded`` key's)
    size: int


class ResponseCache:
    """The server's one cache: an LRU of answers by key, bounded by total bytes."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._entries: OrderedDict[Key, Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Key) -> dict[str, np.ndarray] | None:
        answer = self.find(key)
        return None if answer is None else dict(answer)

    def find(self, key: Key) -> Any:
        """The answer kept for ``key``, as it is kept (None: none)."""
        entry = self._entries.get(key)  # (found only if the whole key is equal)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry.answer

    def put(self, entry: Entry) -> bool:
        """Keep ``entry``, the least recently used ones out to make room; False: it alone
        exceeds the bound (nothing is evicted for it)."""
        if entry.size > self.capacity:
            return False
        old = self._entries.pop(entry.key, None)
        if old is not None:
            self.used -= old.size
        while self._entries and self.used + entry.size > self.capacity:
            _, evicted = self._entries.popitem(last=False)
            self.used -= evicted.size
        self._entries[entry.key] = entry
        self.used += entry.size
        return True


class CachedInvoker:
    """A cached version's invoker: answers from the cache, or from the model it wraps."""

    def __init__(self, inner: Invocable, cache: ResponseCache, mv: ModelVersion) -> None:
        self.inner, self.cache, self.mv = inner, cache, mv
        self.scope = Scope(mv.name, mv.version)

    @property
    def streams(self) -> bool:
        return self.inner.streams

    @property
    def waiting(self) -> int | None:
        return self.inner.waiting

    async def predict(
        self, inputs: Arrays, parameters: dict[str, Any], call: Call | None = None
    ) -> Any:
        start = perf_counter_ns()
        key = request_key(self.scope, inputs, parameters)
        if key is None:  # inputs it cannot key (objects that are not bytes): not cached
            return await self.inner.predict(inputs, parameters, call)
        answer = self.cache.get(key)
        if answer is not None:
            if call is not None:  # (the model did not run: no time of its own)
                call.cache_hit_ns = max(1, perf_counter_ns() - start)
                call.ran = call.done = 0
            return answer
        lookup_ns = perf_counter_ns() - start
        result = await self.inner.predict(inputs, parameters, call)
        start = perf_counter_ns()
        await self._keep(key, result)
        self.mv.stats.cache_miss.add(lookup_ns + perf_counter_ns() - start)
        return result

    async def _keep(self, key: Key, result: Any) -> None:
        if not isinstance(result, Mapping):
            return  # no answer (the response says so): nothing to keep
        if key.size + _answer_bytes(result) <= INLINE_BYTES:
            entry = kept_entry(key, result)
        else:
            entry = await run_request_work(kept_entry, key, result)
        if entry is not None:
            self.cache.put(entry)

    def encoded(self, parts: tuple[bytes | str | None, ...]) -> Encoded | None:
        """The encoded answer kept for a request whose bytes (and headers read) are ``parts``;
        the caller counts a hit (it knows when the answer went out)."""
        answer: Encoded | None = self.cache.find(encoded_key(self.scope, parts))
        return answer

    def keep_encoded(self, parts: tuple[bytes | str | None, ...], answer: Encoded) -> None:
        """Keep an encoded answer (immutable bytes: nothing can change it under the cache)."""
        key = encoded_key(self.scope, parts)
        body, tail, _ = answer
        size = ENTRY_OVERHEAD + key.size + len(body) + sum(len(b) + TENSOR_OVERHEAD for b in tail)
        self.cache.put(Entry(key, answer, size))

    def stream(
        self, inputs: Arrays, parameters: dict[str, Any], call: Call | None = None
    ) -> AsyncIterator[Any]:
        """A version that streams is never cached (its load is refused): this is the one answer
        of a plain model, asked for through a streaming endpoint."""
        return streaming.one(self.predict, inputs, parameters, call)


def request_key(scope: Scope, inputs: Arrays, parameters: dict[str, Any]) -> Key | None:
    """The key of what the model is given; None when an input holds objects other than bytes,
    or a parameter no hashable value (no exact key for them)."""
    parts = []
    size = 0
    for name in sorted(inputs):
        arr = inputs[name]
        raw = _input_bytes(arr)
        if raw is None:
            return None
        size += len(raw)
        dtype = arr.dtype  # (.name too where .str is no numpy type's: bfloat16's is '<V2')
        kind = f"{dtype.str}:{dtype.name}" if dtype.kind == "V" else dtype.str
        parts.append((name, kind, arr.shape, raw))
    try:
        return Key(scope, tuple(parts), frozen(parameters), size)
    except TypeError:  # an unhashable parameter value
        return None


def encoded_key(scope: Scope, parts: tuple[bytes | str | None, ...]) -> Key:
    """The key of a request's bytes (an encoded answer's): ``parts`` as its parameters."""
    size = sum(len(p) for p in parts if p is not None)
    return Key(scope, (), ("encoded", parts), size)


def _input_bytes(arr: np.ndarray) -> bytes | None:
    if arr.dtype.kind != "O":
        return arr.tobytes()
    parts: list[bytes] = []
    for item in arr.reshape(-1):
        if type(item) is not bytes:
            return None
        parts += (_LEN.pack(len(item)), item)
    return b"".join(parts)


def frozen(value: Any) -> Any:
    """``value`` as a comparable, hashable whole, each item with its type: 1, 1.0 and True
    are three different parameters (Python finds them equal)."""
    if isinstance(value, Mapping):
        return ("map", tuple(sorted((str(k), frozen(v)) for k, v in value.items())))
    if isinstance(value, list | tuple):
        return ("seq", tuple(frozen(v) for v in value))
    return (type(value).__name__, value)


def kept_entry(key: Key, result: Mapping[str, Any]) -> Entry | None:
    """The entry for a model's answer: read-only copies of its arrays; None when an output is
    not an array of numbers or of bytes and str (nothing that can change under the cache)."""
    answer: dict[str, np.ndarray] = {}
    size = ENTRY_OVERHEAD + key.size + TENSOR_OVERHEAD * len(key.inputs)
    for name, value in result.items():
        arr = _kept_array(value)
        if arr is None or not isinstance(name, str):
            return None
        answer[name] = arr
        size += TENSOR_OVERHEAD + _array_bytes(arr)
    return Entry(key, answer, size)


def _kept_array(value: Any) -> np.ndarray | None:
    if value is None:
        return None
    try:
        arr = np.array(value, copy=True)  # what the response is built from (np.asarray), copied
    except (TypeError, ValueError):
        return None
    if arr.dtype.kind == "O" and not all(type(x) in (bytes, str) for x in arr.reshape(-1)):
        return None
    arr.setflags(write=False)
    return arr


def _array_bytes(arr: np.ndarray) -> int:
    if arr.dtype.kind != "O":
        return int(arr.nbytes)
    return sum(len(x) + ELEMENT_OVERHEAD for x in arr.reshape(-1))


def _answer_bytes(result: Mapping[str, Any]) -> int:
    """About the bytes of an answer, cheaply (its BYTES elements counted as pointers)."""
    return sum(int(v.nbytes) if isinstance(v, np.ndarray) else 0 for v in result.values())
