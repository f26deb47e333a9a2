"""How one family handler serves half a request: the generator it finds is wrapped.

Each instance runs the family's own route handler on the client's own body, so parsing,
defaults and framing stay the family's. Only the generator differs (``GENERATOR_WRAP``):
  - on a prefill instance it prefills, chooses the next token and hands the cache over; the
    handler then asks for one more delta and gets ``Interrupted`` instead;
  - on a decode instance its stream first replays the deltas the prefill instance produced,
    then yields the deltas the engine decodes from the shipped cache.
``SplitStream.keep`` tells which chunks the client has not seen yet: those made after the
replayed deltas.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rosettaserve.core.errors import ServingError, Unsupported
from rosettaserve.core.generate import (
    GENERATOR_WRAP,
    REPLY_IDENTITY,
    DeltaStream,
    GenerateDelta,
    GenerateRequest,
    GeneratorInfo,
    TextGenerator,
)
from rosettaserve.pd.kv_transfer import Geometry, geometry
from rosettaserve.runtimes.llm.engine import Engine
from rosettaserve.runtimes.llm.stream import GenerationStream


class Interrupted(BaseException):  # a signal, like GeneratorExit, not a failure
    """Stops a family handler without a chunk of its own: the sequence was handed over,
    preempted or failed; the instance's own code decides what the client gets."""


class SplitStream:
    """The deltas a family handler sees: ``shipped`` first, then the engine's; after
    ``stop_after`` deltas (prefill instance) the next pull raises ``Interrupted``."""

    def __init__(
        self,
        inner: GenerationStream,
        shipped: list[GenerateDelta],
        replayed: int,
        stop_after: int | None = None,
    ) -> None:
        self.inner = inner
        self._shipped = deque(shipped)
        self.replayed = replayed  # deltas whose chunks the client already has
        self.stop_after = stop_after
        self.seen: list[GenerateDelta] = []
        self.done = False  # the final delta went out
        self.failure: ServingError | None = None

    @property
    def handed(self) -> int:
        return len(self.seen)

    @property
    def keep(self) -> bool:
        """Whether a chunk the handler makes now is new to the client."""
        return self.replayed == 0 or self.handed > self.replayed

    def __aiter__(self) -> SplitStream:
        return self

    async def __anext__(self) -> GenerateDelta:
        if self.done:
            raise StopAsyncIteration
        if self.stop_after is not None and self.handed >= self.stop_after:
            raise Interrupted("handed over")
        if self._shipped:
            delta = self._shipped.popleft()
        else:
            try:
                delta = await self.inner.__anext__()
            except ServingError as exc:
                self.failure = exc
                raise Interrupted(exc.message) from exc
        self.seen.append(delta)
        self.done = delta.finish_reason is not None
        return delta

    def cancel(self) -> None:
        self.inner.cancel()


class Delegate:
    """A TextGenerator that passes everything but ``generate`` to the model."""

    def __init__(self, inner: TextGenerator) -> None:
        self.inner = inner

    @property
    def info(self) -> GeneratorInfo:
        return self.inner.info

    def generate(self, request: GenerateRequest) -> DeltaStream:
        return self.inner.generate(request)

    def chat_prompt(self, messages: list[dict[str, Any]]) -> str:
        return self.inner.chat_prompt(messages)

    def tokenize(self, text: str) -> list[int]:
        return self.inner.tokenize(text)

    def decode(self, token_ids: list[int]) -> str:
        return self.inner.decode(token_ids)


class Hooked(Delegate):
    def __init__(self, inner: TextGenerator, on_generate: Callable[..., DeltaStream]) -> None:
        super().__init__(inner)
        self._on_generate = on_generate

    def generate(self, request: GenerateRequest) -> DeltaStream:
        return self._on_generate(self.inner, request)


@contextmanager
def hooked(
    on_generate: Callable[[TextGenerator, GenerateRequest], DeltaStream],
    identity: dict[str, Any],
) -> Iterator[None]:
    """Within the block, family handlers get generators whose ``generate`` is ``on_generate``,
    and OpenAI reply ids come from (or are recorded into) ``identity``."""
    wrap = GENERATOR_WRAP.set(lambda inner: Hooked(inner, on_generate))
    ident = REPLY_IDENTITY.set(identity)
    try:
        yield
    finally:
        REPLY_IDENTITY.reset(ident)
        GENERATOR_WRAP.reset(wrap)


def engine_of(generator: TextGenerator) -> Engine:
    engine = getattr(generator, "engine", None)
    if not isinstance(engine, Engine):
        raise Unsupported("prefill/decode disaggregation needs a model of runtime: llm")
    return engine


_GEOMETRY: weakref.WeakKeyDictionary[Engine, Geometry] = weakref.WeakKeyDictionary()


def geometry_of(engine: Engine) -> Geometry:
    geo = _GEOMETRY.get(engine)
    if geo is None:
        geo = _GEOMETRY[engine] = geometry(engine.runner.model)
    return geo
