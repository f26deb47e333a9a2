"""The data plane every protocol adapter calls: lookup, validation, invocation, conversion."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from time import perf_counter_ns as _perf_counter_ns
from typing import Any, Final, Protocol

import numpy as np

from rosettaserve.core import queue_limit, share, streaming
from rosettaserve.core.call import PROTOCOL, TIMEOUT_US, Call
from rosettaserve.core.errors import (
    DeadlineExceeded,
    Forbidden,
    InvalidInput,
    ModelNotFound,
    ModelNotReady,
    ServingError,
)
from rosettaserve.core.invoker import Invocable
from rosettaserve.core.outputs import batch_rows, to_response
from rosettaserve.core.registry import (
    ON_DEMAND,
    IndexEntry,
    ModelControl,
    ModelVersion,
    Registry,
    VersionState,
)
from rosettaserve.core.run_at_once import bounded
from rosettaserve.core.types import (
    InferenceRequest,
    InferenceResponse,
    RequestedOutput,
    Tensor,
    TensorSpec,
    shape_matches,
)

SERVER_NAME = "rosettaserve"
MAX_MODEL_NAME_BYTES = 255  # a folder name's limit (NAME_MAX of Linux's and macOS's file systems)
SHOWN_NAME = 64  # the characters of a name from a request that an error message quotes
# Final: compiled, a C static, not a lookup in the module's dict [cost: final-static]
perf_counter_ns: Final = _perf_counter_ns


@dataclass
class ServerInfo:
    name: str = SERVER_NAME
    version: str = "0.1.0"
    extensions: list[str] = field(default_factory=list)
    strict_readiness: bool = True


@dataclass(frozen=True)
class Limits:
    """Server-wide defaults; a model's model.yaml may set its own."""

    max_queue_size: int = 0  # requests waiting per model version; beyond: 429. 0: no limit
    timeout_us: int = 0  # request timeout covering queue and execution; 0: none


class Observer(Protocol):
    """Told about every inference that reached a served model version (metrics)."""

    def observe(self, mv: ModelVersion, protocol: str, outcome: str, call: Call, end: int) -> None:
        """``outcome``: "success", "cancelled" or the error kind's lower-case name."""


class DataPlane:
    def __init__(
        self,
        registry: Registry,
        info: ServerInfo | None = None,
        control: ModelControl | None = None,
        limits: Limits | None = None,
        waker: Callable[[ModelVersion], Awaitable[None]] | None = None,
    ) -> None:
        self.registry = registry
        self.info = info or ServerInfo()
        self.control = control  # None: model control is off
        self.limits = limits or Limits()
        self.observer: Observer | None = None
        # --cache-size set: versions with response_cache may have encoded answers (a protocol
        # looks for them only then: other servers' requests pay nothing for the lookup)
        self.answers_cached = False
        # loads a version that is served but not loaded (load: lazy, unloaded when idle or
        # evicted) before its request goes on; the repository's (None: versions never wait)
        self.waker = waker
        self.started = False

    # -- health and metadata -------------------------------------------------------------------

    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        if not self.started:
            return False
        if not self.info.strict_readiness:
            return True
        return all(
            # one that loads on demand (unloaded, or loading for a request): nothing to wait for
            v.ready or v.state is VersionState.UNLOADED or ON_DEMAND in v.extra
            for name in self.registry.model_names()
            for v in self.registry.versions(name) or []
        )

    def model_versions(self, name: str) -> list[ModelVersion]:
        versions = self.registry.versions(name)
        if versions is None:
            raise ModelNotFound(f"unknown model '{name}'")
        return versions

    def resolve(self, name: str, version: str = "") -> ModelVersion:
        """The version a request means: the one named, or the highest that is ready."""
        versions = self.model_versions(name)
        if version:
            for candidate in versions:
                if candidate.version == version:
                    return candidate
            served = ", ".join(v.version for v in versions) or "none"
            raise ModelNotFound(
                f"model '{name}' has no version {version} (served versions: {served})"
            )
        for candidate in reversed(versions):  # oldest first: the last ready one is the highest
            if candidate.state is VersionState.READY:  # (.ready, without a property call)
                return candidate
        if versions:
            return versions[-1]
        raise ModelNotFound(f"model '{name}' has no available versions (it is unloaded)")

    def select_versions(self, name: str = "", version: str = "") -> list[ModelVersion]:
        """Every served version, every version of ``name``, or the one version named."""
        if not name:
            return [v for n in self.registry.model_names() for v in self.registry.versions(n) or []]
        if version:
            return [self.resolve(name, version)]
        return list(self.model_versions(name))

    # -- model control (repository extension) --------------------------------------------------

    def _control(self) -> ModelControl:
        if self.control is None:
            raise Forbidden(
                "model control is disabled; start the server with --enable-model-control"
            )
        return self.control

    def repository_index(self, ready_only: bool = False) -> list[IndexEntry]:
        entries = self._control().index()
        return [e for e in entries if e.state == "READY"] if ready_only else entries

    async def load_model(self, name: str) -> None:
        await self._control().load_model(check_model_name(name))

    async def unload_model(self, name: str) -> None:
        await self._control().unload_model(check_model_name(name))

    def ready_version(self, name: str, version: str = "") -> ModelVersion:
        return _check_ready(name, self.resolve(name, version))

    async def loaded_version(self, name: str, version: str = "") -> ModelVersion:
        """``ready_version``, a version that loads on demand loaded first (the request waits)."""
        mv = self.resolve(name, version)
        if mv.state is not VersionState.READY:
            mv = await self.wake(name, mv)
        return mv

    async def wake(self, name: str, mv: ModelVersion) -> ModelVersion:
        """``mv`` loaded if it loads on demand, then checked ready."""
        if self.waker is not None:
            await self.waker(mv)
        return _check_ready(name, mv)

    # -- inference -----------------------------------------------------------------------------

    async def infer(
        self, request: InferenceRequest, resolved: ModelVersion | None = None
    ) -> InferenceResponse:
        """``resolved``: the version ``resolve`` would find for the request, when the caller
        has just found it by its own protocol's rules (not looked up a second time)."""
        mv = (
            self.resolve(request.model_name, request.model_version)
            if resolved is None
            else resolved
        )
        if mv.state is not VersionState.READY:
            mv = await self.wake(request.model_name, mv)
        call = Call(perf_counter_ns())
        if share.PRIORITY in request.context:  # a protocol's own field (core/share.py)
            share.prioritise(request.context[share.PRIORITY])
        held: share.Share | None = None  # counted against the queue limit by its key
        try:
            invoker = prepare(mv, request)
            if invoker.streams:
                raise InvalidInput(
                    f"model '{mv.name}' streams its responses; call it through a streaming endpoint"
                )
            held = self.admit(mv, invoker)
            with mv.in_use():
                call.submitted = perf_counter_ns()
                timeout_us = self._timeout_us(mv, request)
                if timeout_us:
                    result = await self._within(mv, invoker, request, call, timeout_us)
                else:  # (awaited here, not in a coroutine of its own) [cost: inline-await]
                    arrays = input_arrays(request)
                    result = await invoker.predict(arrays, request.parameters, call)
            response = to_response(mv, request, result)
        except ServingError as exc:
            self.failed(mv, request, call, exc.kind.name.lower())
            raise
        except asyncio.CancelledError:  # the client went away
            self.failed(mv, request, call, "cancelled")
            raise
        finally:
            if held is not None:
                queue_limit.release(mv, held)
        self.succeeded(mv, request, call, perf_counter_ns())
        return response

    def infer_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        """One response per item a streaming model yields (any model: its one answer)."""
        return streaming.responses(self, request)

    def admit(self, mv: ModelVersion, invoker: Invocable) -> share.Share | None:
        """The queue limit: beyond it a request is refused at once, not queued, unless its API
        key is under its share (core/queue_limit.py). Counted: what to ``release`` after it."""
        limit = self.limits.max_queue_size if mv.max_queue_size is None else mv.max_queue_size
        if limit <= 0:
            return None
        waiting = invoker.waiting
        return queue_limit.admit(mv, limit, mv.inflight if waiting is None else waiting)

    async def _within(
        self,
        mv: ModelVersion,
        invoker: Invocable,
        request: InferenceRequest,
        call: Call,
        timeout_us: int,
    ) -> Any:
        """Run the model within the request's timeout (then the work is dropped: a queued
        request leaves its queue, a running one's result is discarded)."""
        arrays = input_arrays(request)
        call.deadline = deadline = asyncio.get_running_loop().time() + timeout_us / 1e6
        try:  # (bounded: it needs no task, and a server may run this step without one)
            return await bounded(invoker.predict(arrays, request.parameters, call), deadline)
        except TimeoutError:
            where = "while it ran (its result is discarded)" if call.ran else "while queued"
            raise DeadlineExceeded(
                f"model '{mv.name}' version {mv.version} did not answer within the request "
                f"timeout of {timeout_us / 1000:g} ms: it expired {where}"
            ) from None

    def _timeout_us(self, mv: ModelVersion, request: InferenceRequest) -> int:
        override: int | None = request.context.get(TIMEOUT_US)
        if override is not None:
            return override
        return self.limits.timeout_us if mv.timeout_us is None else mv.timeout_us

    def succeeded(self, mv: ModelVersion, request: InferenceRequest, call: Call, end: int) -> None:
        stats = mv.stats
        if call.cache_hit_ns:  # the response cache answered: the model did not run
            stats.record_cache_hit(call, end)
        else:
            size = batch_size(mv, request)
            stats.record_success(size, call, end)
            if not call.batch_size:  # it ran alone: one execution (a batcher records its own)
                ran = call.ran or call.submitted
                done = call.done or ran
                stats.record_execution(size, call.submitted - call.start, done - ran, end - done)
        if self.observer is not None:
            self.observer.observe(mv, request.context.get(PROTOCOL, ""), "success", call, end)

    def answered_from_cache(self, mv: ModelVersion, protocol: str, start: int) -> None:
        """A request a protocol answered with an encoded answer the response cache kept (it
        never reached ``infer``): counted as a hit there is, its lookup the whole request."""
        end = perf_counter_ns()
        call = Call(start, cache_hit_ns=max(1, end - start))
        mv.stats.record_cache_hit(call, end)
        if self.observer is not None:
            self.observer.observe(mv, protocol, "success", call, end)

    def failed(self, mv: ModelVersion, request: InferenceRequest, call: Call, outcome: str) -> None:
        if outcome != "cancelled":
            mv.stats.record_failure(call.start)
        if self.observer is not None:
            protocol = request.context.get(PROTOCOL, "")
            self.observer.observe(mv, protocol, outcome, call, perf_counter_ns())


def _check_ready(name: str, mv: ModelVersion) -> ModelVersion:
    if not mv.ready:
        why = f": {mv.reason}" if mv.reason else ""
        raise ModelNotReady(
            f"model '{name}' version {mv.version} is not ready ({mv.state.value}){why}"
        )
    return mv


def check_model_name(name: str) -> str:
    """A model name from a request may only name a folder directly inside the repository: no
    path, and no longer than a folder name may be (what the file system would refuse)."""
    if not name or ".." in name or any(c in name for c in "/\\\x00"):
        raise InvalidInput(
            f"invalid model name {shown_name(name)}: a model is named by its folder in the "
            "repository (no paths, '..' or NUL)"
        )
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > MAX_MODEL_NAME_BYTES:
        raise InvalidInput(
            f"invalid model name {shown_name(name)}: {size} bytes in UTF-8, more than a folder "
            f"name may have ({MAX_MODEL_NAME_BYTES})"
        )
    return name


def shown_name(name: str) -> str:
    """A name from a request as an error message quotes it: at most SHOWN_NAME characters."""
    if len(name) <= SHOWN_NAME:
        return repr(name)
    return f"{name[:SHOWN_NAME]!r}... ({len(name)} characters)"


def batch_size(mv: ModelVersion, request: InferenceRequest) -> int:
    rows = batch_rows(mv, request)
    return rows if rows >= 0 else 1


def prepare(mv: ModelVersion, request: InferenceRequest) -> Invocable:
    check_inputs(mv, request.inputs)
    check_outputs(mv, request.outputs)
    assert mv.invoker is not None
    return mv.invoker


def input_arrays(request: InferenceRequest) -> dict[str, np.ndarray]:
    return {t.name: t.data for t in request.inputs}


def check_inputs(mv: ModelVersion, inputs: list[Tensor]) -> None:
    """Names, datatypes and shapes against the model's signature (when it declares one)."""
    seen: set[str] = set()
    specs = mv.signature().input_specs
    for tensor in inputs:
        name = tensor.name
        if name in seen:
            raise InvalidInput(f"input '{name}' appears more than once in the request")
        seen.add(name)
        spec = specs.get(name)
        if spec is None:
            if specs:
                raise InvalidInput(
                    f"unexpected input '{name}' for model '{mv.name}'; it takes {sorted(specs)}"
                )
            continue
        _check_tensor(mv, spec, tensor)
    if len(seen) < len(specs):  # every name seen is a spec's (others were refused above)
        missing = [name for name in specs if name not in seen]
        raise InvalidInput(
            f"model '{mv.name}' expects inputs {list(specs)}, but {missing} "
            f"{'is' if len(missing) == 1 else 'are'} missing"
        )


def _check_tensor(mv: ModelVersion, spec: TensorSpec, tensor: Tensor) -> None:
    if tensor.datatype != spec.datatype:
        raise InvalidInput(
            f"input '{tensor.name}' has datatype {tensor.datatype}, "
            f"but model '{mv.name}' expects {spec.datatype}"
        )
    if not shape_matches(spec.shape, tensor.shape):
        raise InvalidInput(
            f"input '{tensor.name}' has shape {list(tensor.shape)}, "
            f"but model '{mv.name}' expects {list(spec.shape)} (-1 = any size)"
        )
    if mv.max_batch_size > 0 and tensor.shape and tensor.shape[0] > mv.max_batch_size:
        raise InvalidInput(
            f"input '{tensor.name}' has batch size {tensor.shape[0]}, "
            f"but model '{mv.name}' accepts at most {mv.max_batch_size}"
        )


def check_outputs(mv: ModelVersion, outputs: list[RequestedOutput] | None) -> None:
    if outputs is None:
        return
    known = mv.signature().output_specs
    seen: set[str] = set()
    for out in outputs:
        if out.name in seen:
            raise InvalidInput(f"output '{out.name}' is requested more than once")
        seen.add(out.name)
        if known and out.name not in known:
            raise InvalidInput(
                f"unexpected output '{out.name}' for model '{mv.name}'; it has {sorted(known)}"
            )
