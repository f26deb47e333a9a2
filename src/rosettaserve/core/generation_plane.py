"""The generation plane: what ``DataPlane`` is to tensor requests, for LLM requests.

Every LLM API family calls it, and only it: it finds the model and checks it is ready, admits
the request against the queue limit (429 / RESOURCE_EXHAUSTED), refuses what the model's engine
does not compute (400: prompt logprobs on the built-in engine), holds it to the request
timeout (504), counts it in flight on its version (unloading waits for it), cancels the
engine's work when the client goes away, and reports the LLM figures (tokens, time to first
token, inter-token latency, end-to-end latency, outcome) to the same observer as the data
plane. Prefill/decode disaggregation is an explicit argument of one request (``Split``): it
says how the request's deltas are made on this instance.

Nothing long runs on the event loop: a text prompt longer than ``INLINE_PROMPT_CHARS`` is
checked against the window first (a prompt that cannot fit, whatever its tokens, is refused
before it is tokenized) and tokenized on the request-work threads (core/executor.py), a
chat whose body is larger than ``INLINE_CHAT_BYTES`` is rendered by its template there too, and
so is a structured output's grammar compiled, unless the engine has it already
(core/structured_output.py).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from time import perf_counter_ns
from typing import Any, Protocol

from rosettaserve.core import queue_limit, share
from rosettaserve.core.bounded_store import BoundedStore
from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import (
    DeadlineExceeded,
    InvalidInput,
    ModelNotFound,
    ModelNotReady,
    ServingError,
)
from rosettaserve.core.executor import run_request_work
from rosettaserve.core.generate import (
    ChatTemplate,
    Completion,
    DeltaStream,
    GenerateDelta,
    GenerateRequest,
    TextGenerator,
)
from rosettaserve.core.registry import ModelVersion, VersionState
from rosettaserve.core.run_at_once import bounded
from rosettaserve.core.structured_output import prepare_constraint

TEXT_RUNTIMES = ("llm", "vllm")  # the runtimes whose models generate text
# A longer text prompt is tokenized on the request-work threads, where its tokenizing costs
# several times a thread's round trip [cost: inline-prompt]; a shorter one is tokenized in
# place, by the engine.
INLINE_PROMPT_CHARS = 512
# A chat whose request body is larger is rendered by its template on the request-work threads
# (the body bounds the text of its messages).
INLINE_CHAT_BYTES = 64 * 1024
DEFAULT_RESPONSES_STORE = 1000  # the Responses API's stored responses (--responses-store)


class Split(Protocol):
    """Prefill/decode disaggregation's part in one request (``None``: served whole here).

    ``start`` makes the request's deltas on this instance: a prefill instance's stream ends
    after the token it hands over, a decode instance's begins with the deltas the prefill
    instance made. The first ``sent`` deltas are ones the client already has; ``identity``
    holds the reply id and creation time both halves of one response share.
    """

    identity: dict[str, Any]

    @property
    def sent(self) -> int: ...

    @property
    def prompt_tokens(self) -> int | None:
        """The prompt tokens this part counts (None: the usage's; 0: counted elsewhere)."""
        ...

    def start(self, generator: TextGenerator, request: GenerateRequest) -> DeltaStream: ...


class GenerationSeries(Protocol):
    """One model version's LLM figures (observability.metrics keeps them)."""

    def first_token(self, ns: int) -> None: ...

    def inter_token(self, ns: int) -> None: ...

    def finished(
        self, family: str, outcome: str, *, prompt_tokens: int, tokens: int, start: int, end: int
    ) -> None:
        """``outcome``: "success", "cancelled" or the error kind's lower-case name."""


class GenerationObserver(Protocol):
    def generation_series(self, mv: ModelVersion) -> GenerationSeries: ...


class Framer(Protocol):
    """A family's stream framing: the bytes each delta becomes, and around them."""

    def head(self) -> bytes:
        """Before the first delta (b"": nothing)."""
        ...

    def seen(self, delta: GenerateDelta) -> None:
        """A delta the client already has (sent by a prefill instance): state only."""

    def chunk(self, delta: GenerateDelta) -> bytes: ...

    def tail(self) -> bytes:
        """After the last delta of every sequence."""
        ...

    def error(self, exc: ServingError) -> bytes:
        """The last chunk of a stream that failed after it began."""
        ...


class GenerationPlane:
    def __init__(
        self,
        dataplane: DataPlane,
        *,
        trust_request_chat_template: bool = False,
        responses_store: int = DEFAULT_RESPONSES_STORE,
    ) -> None:
        self.dataplane = dataplane  # its registry, limits and readiness
        self.observer: GenerationObserver | None = None
        # a chat request's own chat template is rendered (else refused: vLLM's flag)
        self.trust_request_chat_template = trust_request_chat_template
        # the Responses API's responses, kept for previous_response_id, GET and DELETE
        self.responses: BoundedStore[Any] = BoundedStore(responses_store)

    @property
    def registry(self) -> Any:
        return self.dataplane.registry

    def find(self, name: str = "", version: str = "") -> tuple[ModelVersion, TextGenerator]:
        """The LLM model named (that version, or its highest ready one), or the first served."""
        registry = self.dataplane.registry
        names = [name] if name else sorted(registry.model_names())
        for candidate in names:
            versions = registry.versions(candidate) or []
            if version:
                versions = [v for v in versions if v.version == version]
            if name and not versions:
                break
            for mv in sorted(versions, key=lambda v: (v.ready, int(v.version)), reverse=True):
                if isinstance(mv.model, TextGenerator) and mv.ready:
                    return mv, mv.model
                if mv.runtime in TEXT_RUNTIMES and not mv.ready:  # loading (vLLM's: ~30 s), failed
                    why = f": {mv.reason}" if mv.reason else ""
                    raise ModelNotReady(f"model '{mv.name}' is not ready ({mv.state.value}){why}")
            if name:
                raise InvalidInput(
                    f"model '{name}' is not a text generation model (runtime: llm or vllm)"
                )
        if name:
            which = f"model '{name}' version {version}" if version else f"model '{name}'"
            raise ModelNotFound(f"the {which} does not exist")
        raise ModelNotFound("no text generation model (runtime: llm or vllm) is served")

    async def loaded(self, name: str = "", version: str = "") -> tuple[ModelVersion, TextGenerator]:
        """``find``, the LLM model named loaded first if it loads on demand (the request waits:
        load: lazy, or unloaded when idle or evicted)."""
        versions = self.dataplane.registry.versions(name) if name else None
        waker = self.dataplane.waker
        if versions and waker is not None:
            chosen = [v for v in versions if not version or v.version == version]
            if chosen and not any(v.ready for v in chosen):
                latest = max(chosen, key=lambda v: int(v.version))
                if latest.state is VersionState.UNLOADED and latest.runtime in TEXT_RUNTIMES:
                    await waker(latest)
        return self.find(name, version)

    def generators(self) -> list[tuple[ModelVersion, TextGenerator]]:
        """Every LLM model's highest ready version."""
        found: list[tuple[ModelVersion, TextGenerator]] = []
        registry = self.dataplane.registry
        for name in sorted(registry.model_names()):
            for mv in reversed(registry.versions(name) or []):
                if mv.ready and isinstance(mv.model, TextGenerator):
                    found.append((mv, mv.model))
                    break
        return found

    async def generate(
        self,
        family: str,
        mv: ModelVersion,
        generator: TextGenerator,
        request: GenerateRequest,
        split: Split | None = None,
    ) -> Generation:
        """Admit ``request`` and start it; the deltas come from the returned ``Generation``."""
        start = perf_counter_ns()
        series = self.observer.generation_series(mv) if self.observer is not None else None
        if request.priority is not None:  # a protocol's own field (core/share.py)
            share.prioritise(request.priority)
        held: share.Share | None = None  # counted against the queue limit by its key
        try:
            held = self.admit(mv, generator)
            can_serve(mv, generator, request, split)
            with mv:  # in flight while a long prompt is tokenized: unloading waits for it
                await tokenize_long_prompt(generator, request)
                await prepare_constraint(generator, request.sampling.constraint)
            stream = split.start(generator, request) if split else generator.generate(request)
        except BaseException as exc:  # (cancelled too: the client left while it was tokenized)
            queue_limit.release(mv, held)
            if series is not None and isinstance(exc, ServingError):
                outcome, end = exc.kind.name.lower(), perf_counter_ns()
                series.finished(family, outcome, prompt_tokens=0, tokens=0, start=start, end=end)
            raise
        return Generation(
            mv,
            stream,
            request.n,
            family=family,
            split=split,
            series=series,
            start=start,
            timeout_s=self._timeout(mv),
            held=held,
        )

    def admit(self, mv: ModelVersion, generator: TextGenerator) -> share.Share | None:
        """The queue limit (--max-queue-size, model.yaml max_queue_size): requests beyond the
        engine's running sequences wait; beyond the limit a request is refused at once, unless
        its API key is under its share (core/queue_limit.py). Counted: what to ``release``."""
        limits = self.dataplane.limits
        limit = limits.max_queue_size if mv.max_queue_size is None else mv.max_queue_size
        if limit <= 0:
            return None
        return queue_limit.admit(mv, limit, max(0, mv.inflight - generator.info.max_num_seqs))

    def _timeout(self, mv: ModelVersion) -> float:
        """The request timeout in seconds (0: none): model.yaml's, or --request-timeout."""
        us = self.dataplane.limits.timeout_us if mv.timeout_us is None else mv.timeout_us
        return us / 1e6


def can_serve(
    mv: ModelVersion, generator: TextGenerator, request: GenerateRequest, split: Split | None
) -> None:
    """What a request asks that only some engines compute: refused (400) where it would not be
    computed, never served as if it had not been asked."""
    if request.sampling.prompt_logprobs is not None:
        if split is not None:  # the hand-over between instances does not carry them
            raise InvalidInput(
                "'prompt_logprobs' is not supported with prefill/decode disaggregation"
            )
        if not generator.info.prompt_logprobs:
            raise InvalidInput(
                f"'prompt_logprobs' is not supported by model '{mv.name}' (runtime: "
                f"{mv.runtime}: its engine computes the logits of a prompt's last token only; "
                "runtime: vllm computes them)"
            )


async def tokenize_long_prompt(generator: TextGenerator, request: GenerateRequest) -> None:
    """A long text prompt refused when it cannot fit the window, else tokenized on the
    request-work threads (``request.prompt_token_ids`` set); a short one is left to the engine."""
    prompt = request.prompt
    if request.prompt_token_ids is not None or prompt is None:
        return
    if len(prompt) > INLINE_PROMPT_CHARS:
        generator.info.check_prompt_chars(prompt)
        ids = await tokenized(generator, prompt, request.add_special_tokens)
        request.prompt_token_ids = ids


async def tokenized(generator: TextGenerator, text: str, special: bool = True) -> list[int]:
    """``text``'s token ids: tokenized in place when it is short, on the request-work threads
    when it is long."""
    if len(text) <= INLINE_PROMPT_CHARS:
        return generator.tokenize(text, special)
    return await run_request_work(generator.tokenize, text, special)


async def chat_prompt(
    generator: TextGenerator,
    messages: list[dict[str, Any]],
    body_size: int,
    chat: ChatTemplate | None = None,
) -> str:
    """The chat's prompt, rendered by the model's template (``chat``: the request's variables
    and template): in place for a small request body, on the request-work threads for a large
    one."""
    if body_size <= INLINE_CHAT_BYTES:
        return generator.chat_prompt(messages, chat)
    return await run_request_work(generator.chat_prompt, messages, chat)


class Generation:
    """One request's deltas, as the plane hands them to a family: counted in flight, held to
    the timeout, timed for the metrics; closing it early (the client left) cancels the work."""

    def __init__(
        self,
        mv: ModelVersion,
        stream: DeltaStream,
        n: int,
        *,
        family: str,
        split: Split | None,
        series: GenerationSeries | None,
        start: int,
        timeout_s: float,
        held: share.Share | None = None,
    ) -> None:
        self.mv = mv
        self.stream = stream
        self.n = n
        self.family = family
        self.split = split
        self.series = series
        self.start = start
        self.sent = split.sent if split is not None else 0  # deltas the client already has
        self.timeout_s = timeout_s
        self.deadline: float | None = None
        self.handed = 0  # deltas handed out
        self.finished = 0  # sequences whose last delta was handed out
        self.tokens = 0  # tokens generated on this instance
        self.prompt_tokens = 0
        self.timed = False  # the first token was timed
        self.last: dict[int, int] = {}  # perf_counter_ns of each sequence's latest token
        self.closed = False
        self.held = held  # counted by its key against the queue limit until closed
        mv.__enter__()  # in flight until closed

    @property
    def complete(self) -> bool:
        """Every sequence ended (not a prefill instance's part that stopped at the handover)."""
        return self.finished >= self.n

    def __aiter__(self) -> Generation:
        return self

    async def __anext__(self) -> GenerateDelta:
        if self.closed:
            raise StopAsyncIteration
        try:
            delta = await self._next()
        except StopAsyncIteration:
            self.close("success" if self.complete or self.split is not None else "cancelled")
            raise
        except ServingError as exc:
            self.close(exc.kind.name.lower())
            raise
        except BaseException:  # cancelled: the client went away
            self.close("cancelled")
            raise
        self._count(delta)
        return delta

    async def _next(self) -> GenerateDelta:
        if not self.timeout_s:
            return await self.stream.__anext__()
        if self.deadline is None:
            now = asyncio.get_running_loop().time()
            self.deadline = now + self.timeout_s - (perf_counter_ns() - self.start) / 1e9
        try:  # (bounded: it needs no task, and a server may run this step without one)
            return await bounded(self.stream.__anext__(), self.deadline)
        except TimeoutError:
            raise DeadlineExceeded(
                f"model '{self.mv.name}' version {self.mv.version} did not finish within the "
                f"request timeout of {self.timeout_s * 1000:g} ms; the generation was stopped"
            ) from None

    def _count(self, delta: GenerateDelta) -> None:
        self.handed += 1
        if delta.finish_reason is not None:
            self.finished += 1
            if delta.usage is not None and not self.prompt_tokens:
                self.prompt_tokens = delta.usage.prompt_tokens
        if self.handed <= self.sent or not delta.token_ids:
            return  # the client has it already: timed where it was made
        now = perf_counter_ns()
        series = self.series
        if series is not None:
            last = self.last.get(delta.index)
            if last is not None:
                series.inter_token(now - last)
            elif not self.timed and self.sent == 0:
                series.first_token(now - self.start)
        self.timed = True
        self.last[delta.index] = now
        self.tokens += len(delta.token_ids)
        if self.complete:
            self.close("success")

    def close(self, outcome: str = "cancelled") -> None:
        """Idempotent: stops the engine's work (if any is left) and reports the request."""
        if self.closed:
            return
        self.closed = True
        self.stream.cancel()
        self.mv.__exit__(None, None, None)
        queue_limit.release(self.mv, self.held)
        self.mv.stats.last_inference_ms = time.time_ns() // 1_000_000  # its idle time from now
        if self.series is None:
            return
        prompt = self.prompt_tokens
        if self.split is not None and self.split.prompt_tokens is not None:
            prompt = self.split.prompt_tokens
        self.series.finished(
            self.family,
            outcome,
            prompt_tokens=prompt,
            tokens=self.tokens,
            start=self.start,
            end=perf_counter_ns(),
        )

    def __del__(self) -> None:
        if not self.closed:  # a reply never sent (its stream was dropped unread)
            self.close()

    async def collect(self) -> list[Completion]:
        """Every sequence's deltas gathered (a non-streaming reply)."""
        completions = [Completion(i) for i in range(self.n)]
        try:
            async for delta in self:
                completions[delta.index].add(delta)
        finally:
            self.close()
        return completions


def reply_identity(split: Split | None, prefix: str) -> tuple[str, int]:
    """A reply's id and creation time: new, or the ones ``split`` carries (and records)."""
    slot = split.identity if split is not None else None
    if slot and isinstance(slot.get("id"), str) and isinstance(slot.get("created"), int):
        return slot["id"], slot["created"]
    pair = f"{prefix}-{uuid.uuid4().hex}", int(time.time())
    if slot is not None:
        slot["id"], slot["created"] = pair
    return pair


async def frames(framer: Framer, generation: Generation) -> AsyncIterator[bytes]:
    """A streaming reply's chunks: the family's framing of the plane's deltas. A failure after
    the stream began is the family's error chunk; leaving early cancels the work."""
    try:
        if generation.sent == 0:
            head = framer.head()
            if head:
                yield head
        async for delta in generation:
            if generation.handed <= generation.sent:
                framer.seen(delta)
                continue
            chunk = framer.chunk(delta)
            if chunk:
                yield chunk
        if generation.complete:
            tail = framer.tail()
            if tail:
                yield tail
    except ServingError as exc:
        yield framer.error(exc)
    finally:
        generation.close()
