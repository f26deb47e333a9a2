"""The ``torchserve`` runtime: a ``.mar`` archive served with its own handler.

Requests are batched as TorchServe's worker batches them: a free worker takes the first waiting
request and waits up to ``max_batch_delay`` milliseconds for ``batch_size`` of them, then calls
the handler once on the batch (in a thread of its own: the event loop never waits on a handler).
``workers`` workers each hold their own handler instance, as TorchServe's worker processes do.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rosettaserve.core.model import Arrays, Model
from rosettaserve.core.timeouts import within
from rosettaserve.core.types import TensorSpec
from rosettaserve.protocols.torchserve.wire import (
    HandlerFailed,
    Parameter,
    TsAnswer,
    TsRequest,
)
from rosettaserve.repository.config import ConfigError
from rosettaserve.runtimes.torchserve import frames, service
from rosettaserve.runtimes.torchserve.mar import DEFAULT_FILE, open_archive

DEFAULT_BATCH_DELAY_MS = 100  # TorchServe's default maxBatchDelay


def create(name: str, version: str, path: Path, config: dict[str, Any]) -> Model:
    return TorchServeModel(name=name, version=version, path=path, config=config)


@dataclass
class _Pending:
    request: TsRequest
    events: asyncio.Queue[frames.Frame | frames.Reply | None] = field(default_factory=asyncio.Queue)


class TorchServeModel(Model):
    platform = "torchserve"

    def load(self) -> None:
        self.archive = open_archive(self._archive_path())
        settings = self._settings()
        self.batch_size = max(1, int(settings.get("batch_size", 1)))
        self.max_batch_delay = float(settings.get("max_batch_delay", DEFAULT_BATCH_DELAY_MS))
        self.workers = max(1, int(settings.get("workers", 1)))
        self.services = [
            service.load_service(self.name, self.archive, self.batch_size)
            for _ in range(self.workers)
        ]
        self._free = list(self.services)  # for predict(): the OIP and grps path
        self._free_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix=f"ts-{self.name}")
        self._queue: asyncio.Queue[_Pending] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        if not self.inputs:
            self.inputs = [TensorSpec("body", "BYTES", (-1,))]
        if not self.outputs:
            self.outputs = [TensorSpec("output", "BYTES", (-1,))]

    def unload(self) -> None:
        for task in self._tasks:
            task.get_loop().call_soon_threadsafe(task.cancel)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.archive.remove()

    @property
    def manifest(self) -> dict[str, Any]:
        return self.archive.manifest

    def _archive_path(self) -> Path:
        named = (self.config.get("parameters") or {}).get("file")
        path = self.path / str(named or DEFAULT_FILE)
        if not named and not path.exists() and (self.path / "MAR-INF").is_dir():
            path = self.path  # the archive, unpacked
        if not path.exists():
            raise ConfigError(f"{path} is missing")
        return path

    def _settings(self) -> dict[str, Any]:
        """model.yaml's parameters over the archive's model-config.yaml (TorchServe's names)."""
        own = dict(self.config.get("parameters") or {})
        config_file = self.manifest["model"].get("configFile")
        archived: dict[str, Any] = {}
        if config_file:
            archived = yaml.safe_load((self.archive.folder / config_file).read_text()) or {}
        names = {"batchSize": "batch_size", "maxBatchDelay": "max_batch_delay"}
        names["minWorkers"] = "workers"
        merged = {ours: archived[theirs] for theirs, ours in names.items() if theirs in archived}
        return merged | own

    async def serve(self, request: TsRequest) -> TsAnswer:
        if self._queue is None:
            self._start()
        assert self._queue is not None
        pending = _Pending(request)
        self._queue.put_nowait(pending)
        first = await pending.events.get()
        if isinstance(first, frames.Frame):
            raise HandlerFailed(first.code, first.message)
        if first is None:
            raise HandlerFailed(503, "Prediction failed")
        answer = TsAnswer(first.status, first.content_type, first.headers, first.body)
        if first.headers.get("ts_stream_next") == "true":
            answer.stream = _rest_of_stream(pending)
        return answer

    def _start(self) -> None:
        self._queue = asyncio.Queue()
        self._tasks = [asyncio.create_task(self._worker(s)) for s in self.services]

    async def _worker(self, handler: Any) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._collect(self._queue, loop)
            await loop.run_in_executor(self._pool, self._run, handler, batch, loop)

    async def _collect(
        self, queue: asyncio.Queue[_Pending], loop: asyncio.AbstractEventLoop
    ) -> list[_Pending]:
        batch = [await queue.get()]
        deadline = loop.time() + self.max_batch_delay / 1000
        while len(batch) < self.batch_size:
            if not queue.empty():
                batch.append(queue.get_nowait())
                continue
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                batch.append(await within(queue.get(), left))
            except TimeoutError:
                break
        return batch

    def _run(self, handler: Any, batch: list[_Pending], loop: asyncio.AbstractEventLoop) -> None:
        def deliver(frame: frames.Frame, last: bool) -> None:
            for i, pending in enumerate(batch):
                if frame.code != 200:
                    event: frames.Frame | frames.Reply | None = frame
                else:
                    event = frame.replies[i] if i < len(frame.replies) else None
                loop.call_soon_threadsafe(pending.events.put_nowait, event)
                if last and frame.code == 200:
                    loop.call_soon_threadsafe(pending.events.put_nowait, None)

        socket = service.FrameSocket(lambda frame: deliver(frame, last=False))
        requests = [service.worker_request(p.request) for p in batch]
        try:
            final = service.run_batch(handler, requests, socket)
        except Exception:  # a frame the handler broke: every request fails as one would
            final = frames.Frame(503, "Prediction failed", [])
        deliver(final, last=True)

    def predict(self, inputs: Arrays, parameters: dict[str, Any] | None = None) -> Arrays:
        """The OIP and grps path: each element of the one BYTES input is a request body."""
        (bodies,) = inputs.values()
        content_type = str((parameters or {}).get("content_type", ""))
        requests = [
            service.worker_request(TsRequest([Parameter("body", content_type, _as_bytes(b))], {}))
            for b in np.asarray(bodies).reshape(-1)
        ]
        chunks: list[list[bytes]] = [[] for _ in requests]

        def collect(frame: frames.Frame) -> None:
            for i, reply in enumerate(frame.replies):
                chunks[i].append(reply.body)

        with self._free_lock:
            handler = self._free.pop() if self._free else self.services[0]
        try:
            final = service.run_batch(handler, requests, service.FrameSocket(collect))
        finally:
            with self._free_lock:
                self._free.append(handler)
        if final.code != 200:
            raise HandlerFailed(final.code, final.message)
        collect(final)
        out = np.empty(len(requests), dtype=object)
        out[:] = [b"".join(c) for c in chunks]
        return {"output": out}


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


async def _rest_of_stream(pending: _Pending) -> AsyncIterator[bytes]:
    while True:
        event = await pending.events.get()
        if not isinstance(event, frames.Reply):
            return
        if event.body:
            yield event.body
