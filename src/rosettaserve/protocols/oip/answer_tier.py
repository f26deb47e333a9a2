"""The response cache's first tier for small OIP requests (REST and gRPC ModelInfer): the
encoded answer, kept by the request's own bytes, so that a hit neither parses the request nor
builds arrays, hashes them and encodes the answer again (scheduling/response_cache.py keeps the
entries, in the one LRU and byte budget of the cache).

Only versions with ``response_cache: true`` (and ``--cache-size``) have the tier. The key is the
version's load (a version loaded again finds none of the old load's entries), the protocol, the
model and version the route names (the answer names them), the request's bytes, and the one
request header the REST route reads (``Inference-Header-Content-Length``: where the JSON ends
and binary data begins). Nothing else a route reads changes the answer's bytes: the request id
echoed back (``X-Request-ID``), compression (``Content-Encoding``, ``Accept-Encoding``),
``X-Priority``, API keys and gRPC metadata are the web and transport layers', around the route,
and apply to a hit as to any request (the priority, the timeout and a gRPC deadline decide when
an answer comes, not what it is).

A request takes the tier's path only when equal bytes mean an equal answer:
- Bodies of at most ``MAX_BYTES`` (larger ones take the tensor path, where hashing the inputs
  dominates the cost anyway).
- Not a request naming shared memory (any ``shared_memory`` in its bytes): its inputs are a
  region's contents, which change while the request's bytes stay the same, and its outputs are
  written into a region, which a hit would not do. A REST body with a ``\\u`` escape is not
  keyed either: an escape may spell ``shared_memory_region`` with other bytes.
- Sequences (a sequence id, its start and end flags) need a model with sequence batching, and a
  version with ``response_cache: true`` cannot have it (its load is refused): the stateful case
  never reaches the tier.
- Only an answer that went out as success is kept (an error is answered afresh each time);
  classification is in the request's bytes, and the class labels belong to the load.
A hit counts as today's hits of the tensor path do (the version's cache_hit and success
statistics, /metrics); a miss goes on to the tensor path, which counts it.
"""

from __future__ import annotations

from typing import Any, Final

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import ServingError
from rosettaserve.core.registry import Encoded, EncodedAnswers, ModelVersion, VersionState

MAX_BYTES: Final = 64 * 1024
SHARED_MEMORY: Final = b"shared_memory"
ESCAPE: Final = b"\\u"


class Slot:
    """Where a request's answer is kept: found, or to be kept once it is encoded."""

    __slots__ = ("answers", "mv", "parts")

    def __init__(
        self, mv: ModelVersion, answers: EncodedAnswers, parts: tuple[bytes | str | None, ...]
    ) -> None:
        self.mv, self.answers, self.parts = mv, answers, parts

    def keep(self, body: bytes, tail: list[Any], header_length: int | None) -> None:
        """Keep an answer as it went out, if it is small too: the tail's buffers copied (they
        may be the model's arrays)."""
        if len(body) + sum(memoryview(b).nbytes for b in tail) > MAX_BYTES:
            return  # (the tensor path keeps it, without a copy on the event loop)
        kept = tuple(bytes(memoryview(b)) for b in tail)
        self.answers.keep_encoded(self.parts, (bytes(body), kept, header_length))


def slot(
    dp: DataPlane, protocol: str, named: tuple[str, str], header: str | None, raw: bytes | bytearray
) -> Slot | None:
    """The tier's slot for a request to ``named`` (its model and version as the request names
    them); None: the request does not take the tier."""
    if not dp.answers_cached or len(raw) > MAX_BYTES or raw.find(SHARED_MEMORY) >= 0:
        return None
    if protocol == "oip_rest" and raw.find(ESCAPE) >= 0:
        return None
    try:
        mv = dp.resolve(*named)
    except ServingError:  # answered by the tensor path (its errors in their usual order)
        return None
    answers = mv.answers
    if answers is None or mv.state is not VersionState.READY:
        return None
    return Slot(mv, answers, (protocol, *named, header, bytes(raw)))


def hit(dp: DataPlane, found: Slot, start: int) -> Encoded | None:
    """The kept answer, counted as a hit in the version's statistics (None: a miss, counted
    by the tensor path the request goes on to)."""
    answer = found.answers.encoded(found.parts)
    if answer is not None:
        dp.answered_from_cache(found.mv, str(found.parts[0]), start)
    return answer
