"""TorchServe's management API on the HTTP port (with ``--enable-model-control``): list,
describe, register (``POST /models?url=NAME.mar``) and unregister models.

The repository is the model store: ``url=NAME.mar`` names an archive at its top level, which
is registered by giving it a model folder (``NAME/1/model.mar`` beside a ``model.yaml`` of
``runtime: torchserve``) and loading that, so it is served again after a restart. Models are
listed and described as TorchServe lists them (sorted, ``limit`` and ``next_page_token``), with
its JSON shapes and its errors.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from urllib.parse import parse_qs

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.registry import ModelVersion
from rosettaserve.protocols.torchserve.rest import error, pretty, render_error
from rosettaserve.protocols.torchserve.wire import TsScalable, default_version
from rosettaserve.web.routing import HttpRequest, HttpResponse, Route

RUNTIME = "torchserve"
_SCALING: set[asyncio.Task[None]] = set()  # scalings answered at once, running on
MODEL = r"/models/(?P<model>[^/]+)"


def routes(dp: DataPlane, store: Path, defaults: dict[str, str]) -> list[Route]:
    """``defaults``: the versions ``set-default`` chose, by model (shared with the inference
    routes)."""
    m = _Management(dp, store, defaults)
    version = MODEL + r"(?:/(?P<version>[^/]+))?"
    return [
        Route("GET", "/models", m.list_models, render_error),
        Route("POST", "/models", m.register, render_error),
        Route("GET", version, m.describe, render_error),
        Route("DELETE", version, m.unregister, render_error),
        Route("PUT", version, m.scale, render_error),
        Route("PUT", MODEL + r"/(?P<version>[^/]+)/set-default", m.set_default, render_error),
    ]


class _Management:
    """The routes' handlers over the data plane and the model store."""

    def __init__(self, dp: DataPlane, store: Path, defaults: dict[str, str]) -> None:
        self.dp, self.store, self.defaults = dp, store, defaults

    async def list_models(self, req: HttpRequest) -> HttpResponse:
        query = _query(req)
        limit, token = _int(query, "limit", 100), _int(query, "next_page_token", 0)
        limit = 100 if limit > 100 or limit < 0 else limit
        names = sorted(n for n in self.dp.registry.model_names() if _versions(self.dp, n))
        last = min(token + limit, len(names))
        doc: dict[str, object] = {}
        if token + limit <= len(names):  # as TorchServe: a token also when the page ends it
            doc["nextPageToken"] = str(last)
        doc["models"] = [
            {
                "modelName": n,
                "modelUrl": _url(default_version(_versions(self.dp, n), self.defaults)),
            }
            for n in names[token:last]
        ]
        return pretty(doc)

    async def describe(self, req: HttpRequest) -> HttpResponse:
        name, version = req.params["model"], req.params.get("version")
        versions = _versions(self.dp, name)
        if not versions:
            return error(404, "ModelNotFoundException", f"Model not found: {name}")
        if version == "all":
            chosen = versions
        else:
            default = default_version(versions, self.defaults)
            chosen = [v for v in versions if v.version == (version or default.version)]
        if not chosen:
            message = f"Model version: {version} does not exist for model: {name}"
            return error(404, "ModelVersionNotFoundException", message)
        return pretty([_describe(mv) for mv in chosen])

    async def register(self, req: HttpRequest) -> HttpResponse:
        url = (_query(req).get("url") or [""])[0]
        if not url:
            return error(400, "BadRequestException", "Parameter url is required.")
        name = Path(url).stem
        archive = self.store / Path(url).name
        if _versions(self.dp, name):
            message = f"Model version 1 for model {name} has already been registered."
            return error(409, "ConflictStatusException", message)
        if not archive.is_file() and not (self.store / name).is_dir():
            return error(404, "ModelNotFoundException", f"Model not found in model store: {url}")
        if not (self.store / name).is_dir():
            _give_a_folder(archive, self.store / name)
        await self.dp.load_model(name)
        message = f'Model "{name}" Version: 1 registered with 1 initial workers'
        return pretty({"status": message})

    async def unregister(self, req: HttpRequest) -> HttpResponse:
        """The model goes, all of it: our repository unloads whole models (a version named
        must be one of them)."""
        name, version = req.params["model"], req.params.get("version")
        versions = _versions(self.dp, name)
        if not versions:
            return error(404, "ModelNotFoundException", f"Model not found: {name}")
        if version is not None and version not in {v.version for v in versions}:
            message = f"Model version: {version} does not exist for model: {name}"
            return error(404, "ModelVersionNotFoundException", message)
        await self.dp.unload_model(name)
        return pretty({"status": f'Model "{name}" unregistered'})

    async def set_default(self, req: HttpRequest) -> HttpResponse:
        name, version = req.params["model"], req.params["version"]
        versions = _versions(self.dp, name)
        if not versions:
            return error(404, "ModelNotFoundException", f"Model not found: {name}")
        if version not in {v.version for v in versions}:
            message = f"Model version: {version} does not exist for model: {name}"
            return error(404, "ModelVersionNotFoundException", message)
        self.defaults[name] = version
        message = f'Default version successfully updated for model "{name}" to "{version}"'
        return pretty({"status": message})

    async def scale(self, req: HttpRequest) -> HttpResponse:
        """Handler instances as TorchServe scales workers: ``synchronous=true`` answers once
        they run, else at once with 202 while they start."""
        name, version = req.params["model"], req.params.get("version")
        query = _query(req)
        workers = _int(query, "min_worker", 1)
        if _int(query, "max_worker", workers) < workers:
            return error(400, "BadRequestException", "max_worker cannot be less than min_worker.")
        chosen = [v for v in _versions(self.dp, name) if version in (None, v.version)][-1:]
        if not chosen:
            return error(404, "ModelNotFoundException", f"Model not found: {name}")
        model = chosen[0].model
        if not isinstance(model, TsScalable) or workers < 1:
            return error(400, "BadRequestException", "min_worker must be 1 or more here.")
        if (query.get("synchronous") or [""])[0].lower() != "true":
            task = asyncio.get_running_loop().create_task(model.scale(workers))
            _SCALING.add(task)
            task.add_done_callback(_SCALING.discard)
            return pretty({"status": "Processing worker updates..."}, 202)
        await model.scale(workers)
        message = f"Workers scaled to {workers} for model: {name}"
        return pretty({"status": message + (f", version: {version}" if version else "")})


def _versions(dp: DataPlane, name: str) -> list[ModelVersion]:
    return [v for v in dp.registry.versions(name) or [] if v.runtime == RUNTIME and v.ready]


def _url(mv: ModelVersion) -> str:
    file = (mv.model.config.get("parameters") or {}).get("file") if mv.model else None
    return f"{mv.name}/{mv.version}/{file or 'model.mar'}"


def _describe(mv: ModelVersion) -> dict[str, object]:
    model = mv.model
    workers = int(getattr(model, "workers", 1))
    return {
        "modelName": mv.name,
        "modelVersion": mv.version,
        "modelUrl": _url(mv),
        "runtime": "python",
        "minWorkers": workers,
        "maxWorkers": workers,
        "batchSize": int(getattr(model, "batch_size", 1)),
        "maxBatchDelay": int(getattr(model, "max_batch_delay", 100)),
        "loadedAtStartup": True,
        "workers": [
            {"id": str(9000 + i), "status": "READY", "pid": os.getpid(), "gpu": False}
            for i in range(workers)
        ],
        "jobQueueStatus": {"pendingRequests": mv.inflight},
    }


def _give_a_folder(archive: Path, folder: Path) -> None:
    version = folder / "1"
    version.mkdir(parents=True)
    try:
        os.link(archive, version / "model.mar")
    except OSError:  # another file system
        shutil.copyfile(archive, version / "model.mar")
    (folder / "model.yaml").write_text(f"runtime: {RUNTIME}\n")


def _query(req: HttpRequest) -> dict[str, list[str]]:
    return parse_qs(req.query.decode("latin-1"))


def _int(query: dict[str, list[str]], key: str, default: int) -> int:
    try:
        return int((query.get(key) or [str(default)])[0])
    except ValueError:
        raise InvalidInput(f"Invalid {key}") from None
