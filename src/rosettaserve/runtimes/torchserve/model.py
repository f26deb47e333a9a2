"""The ``torchserve`` runtime: a ``.mar`` archive served with its own handler.

Requests are batched as TorchServe's worker batches them (``workers.Workers``); ``workers``
workers each hold their own handler instance, as TorchServe's worker processes do.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rosettaserve.core.model import Arrays, Model
from rosettaserve.core.types import TensorSpec
from rosettaserve.protocols.torchserve.wire import (
    Parameter,
    TsAnswer,
    TsRequest,
)
from rosettaserve.repository.config import ConfigError
from rosettaserve.runtimes.torchserve import predict, service
from rosettaserve.runtimes.torchserve.mar import DEFAULT_FILE, open_archive, safe_member_path
from rosettaserve.runtimes.torchserve.predict import Predictor
from rosettaserve.runtimes.torchserve.process import Remote
from rosettaserve.runtimes.torchserve.workers import Workers

DEFAULT_BATCH_DELAY_MS = 100  # TorchServe's default maxBatchDelay


def create(name: str, version: str, path: Path, config: dict[str, Any]) -> Model:
    return TorchServeModel(name=name, version=version, path=path, config=config)


class TorchServeModel(Model):
    platform = "torchserve"

    def load(self) -> None:
        self.archive = open_archive(self._archive_path())
        handlers: list[Predictor] = []
        try:
            settings = self._settings()
            self.batch_size = max(1, int(settings.get("batch_size", 1)))
            self.max_batch_delay = float(settings.get("max_batch_delay", DEFAULT_BATCH_DELAY_MS))
            self.workers = max(1, int(settings.get("workers", 1)))
            for _ in range(self.workers):
                handlers.append(self._handler())
        except BaseException:  # a handler that fails to initialise leaves nothing behind
            for handler in handlers:
                handler.close()
            self._release()
            raise
        self._workers = Workers(handlers, self.batch_size, self.max_batch_delay)
        if not self.inputs:
            self.inputs = [TensorSpec("body", "BYTES", (-1,))]
        if not self.outputs:
            self.outputs = [TensorSpec("output", "BYTES", (-1,))]

    def _handler(self) -> Predictor:
        """One worker's handler: in this process, or with ``isolation: process`` in its own."""
        if self.config.get("isolation") == "process":
            return Remote(self.name, self.archive, self.batch_size)
        return predict.load(self.name, self.archive, self.batch_size)

    def unload(self) -> None:
        self._workers.stop()
        self._release()

    def _release(self) -> None:
        service.forget(self.archive)
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
            inside = safe_member_path(str(config_file)).parts  # (the manifest is user input)
            archived = yaml.safe_load(self.archive.folder.joinpath(*inside).read_text()) or {}
        names = {"batchSize": "batch_size", "maxBatchDelay": "max_batch_delay"}
        names["minWorkers"] = "workers"
        merged = {ours: archived[theirs] for theirs, ours in names.items() if theirs in archived}
        return merged | own

    async def serve(self, request: TsRequest) -> TsAnswer:
        return await self._workers.serve(request)

    async def scale(self, workers: int) -> None:
        """``workers`` handler instances from now on: new ones are loaded (and initialised)
        off the event loop; those beyond the count stop after their batch in hand."""
        while len(self._workers.handlers) < workers:
            handler = await asyncio.to_thread(self._handler)
            self._workers.add(handler)
        self._workers.shrink(len(self._workers.handlers) - workers)
        self.workers = workers

    async def predict(self, inputs: Arrays, parameters: dict[str, Any] | None = None) -> Arrays:
        """The OIP and grps path: each element of the one BYTES input is a request body, sent
        to the handler as a request of its own (batched with the others as TorchServe's are)."""
        (bodies,) = inputs.values()
        content_type = str((parameters or {}).get("content_type", ""))
        requests = [
            TsRequest([Parameter("body", content_type, _as_bytes(b))], {})
            for b in np.asarray(bodies).reshape(-1)
        ]
        answers = await asyncio.gather(*(self._workers.serve(r) for r in requests))
        out = np.empty(len(requests), dtype=object)
        out[:] = [await _whole(answer) for answer in answers]
        return {"output": out}


async def _whole(answer: TsAnswer) -> bytes:
    if answer.stream is None:
        return answer.body
    return answer.body + b"".join([chunk async for chunk in answer.stream])


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()
