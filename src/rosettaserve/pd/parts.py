"""One instance's part of a request split between a prefill and a decode instance.

The family's endpoint runs once on each instance, on the client's own body, with a ``Split``
(core/generation_plane.py) as an explicit argument: its ``start`` makes the deltas of this
instance's part. ``Part`` is that stream:
  - on a prefill instance it ends after the token it chose (the cache goes to the decode
    instance), or earlier if the request ended there;
  - on a decode instance it begins with the deltas the prefill instance made (``shipped``: the
    client has them; the family's framer takes them as state only), then the engine's.
An engine failure is recorded (``failure``) before it propagates, so the instance decides
how it travels (an error reply, a ``retry:`` or ``error:`` frame).
"""

from __future__ import annotations

from collections import deque

from rosettaserve.core.errors import ServingError, Unsupported
from rosettaserve.core.generate import DeltaStream, GenerateDelta, TextGenerator
from rosettaserve.core.pd_engine import PdEngine, pd_engine


class Part:
    """``shipped`` deltas first, then the engine's; at most ``stop_after`` deltas in all."""

    def __init__(
        self,
        inner: DeltaStream,
        shipped: list[GenerateDelta] | None = None,
        stop_after: int | None = None,
    ) -> None:
        self.inner = inner
        self._shipped = deque(shipped or [])
        self.stop_after = stop_after
        self.seen: list[GenerateDelta] = []  # every delta handed out
        self.done = False  # the final delta went out: the request ended
        self.failure: ServingError | None = None

    def __aiter__(self) -> Part:
        return self

    async def __anext__(self) -> GenerateDelta:
        if self.done or (self.stop_after is not None and len(self.seen) >= self.stop_after):
            raise StopAsyncIteration
        if self._shipped:
            delta = self._shipped.popleft()
        else:
            try:
                delta = await self.inner.__anext__()
            except ServingError as exc:
                self.failure = exc
                raise
        self.seen.append(delta)
        self.done = delta.finish_reason is not None
        return delta

    def cancel(self) -> None:
        self.inner.cancel()


def engine_of(generator: TextGenerator) -> PdEngine:
    engine = pd_engine(generator)
    if engine is None:
        raise Unsupported("prefill/decode disaggregation needs a model of runtime: llm or vllm")
    return engine
