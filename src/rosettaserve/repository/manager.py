"""The model repository as the server sees it: what is served, loading, unloading, polling.

A version's model is built by the factory the server hands over (runtimes.create_model): the
repository reads folders and declarations, the runtimes above it turn them into models."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rosettaserve.core.dataplane import shown_name
from rosettaserve.core.errors import InvalidInput, ModelError, ModelNotFound
from rosettaserve.core.executor import ThreadInstances, run_loading
from rosettaserve.core.invoker import Invoker
from rosettaserve.core.model import Model
from rosettaserve.core.registry import IndexEntry, ModelVersion, VersionState
from rosettaserve.core.timeouts import within
from rosettaserve.repository import residency
from rosettaserve.repository.config import CONFIG_FILE, ConfigError, ModelConfig, read_config
from rosettaserve.repository.layout import (
    ModelDir,
    read_class_labels,
    scan_model,
    scan_repository,
)
from rosettaserve.repository.on_demand import DRAIN_TIMEOUT_S, OnDemand
from rosettaserve.repository.residency import Demand
from rosettaserve.repository.warmup import WarmupFailed, sample_arrays, warm_up
from rosettaserve.scheduling.batcher import schedule
from rosettaserve.scheduling.isolation import ProcessModel
from rosettaserve.scheduling.response_cache import CachedInvoker, ResponseCache
from rosettaserve.scheduling.sequence import schedule_sequences

log = logging.getLogger("rosettaserve.repository")
Reporter = Callable[[list[ModelVersion]], None]  # called once per batch of loaded versions
# (name, version, version folder, its config) -> the model, built but not loaded
ModelFactory = Callable[[str, str, Path, ModelConfig], Model]
UNLOAD_MIN_S = 2.0  # a model's unload gets at least this long, even past the drain deadline
# Runtimes whose predict spends its time in native code that releases the GIL (ONNX Runtime,
# scikit-learn's numeric kernels): calls on several threads run in parallel, so by default they
# get one instance per core. A python model's own code holds the GIL: more threads would add
# switching, not throughput, and with ``isolation: process`` each instance is a process holding
# its own copy of the model: one, unless model.yaml asks for more.
PARALLEL_RUNTIMES = frozenset({"onnx", "sklearn"})
RELOAD_FAILED = "the model folder was edited and failed to load; this version keeps serving"


@dataclass
class ModelEntry:
    dir: ModelDir
    config: ModelConfig | None
    error: str = ""
    versions: list[ModelVersion] = field(default_factory=list)  # served, oldest first
    unloaded: bool = False  # unloaded on request: polling leaves it alone until loaded again
    # The folder as it was (``_disk_state``) when an edit of it failed to load while the versions
    # loaded before kept serving: polling leaves it alone until the folder changes again.
    rejected: tuple[float, ...] = ()


class ModelRepository(OnDemand):
    def __init__(
        self,
        root: Path,
        create: ModelFactory,
        report: Reporter | None = None,
        cache: ResponseCache | None = None,
        demand: Demand | None = None,
    ) -> None:
        self.root = root
        self._create = create
        self._cache = cache  # --cache-size: the answers of models with response_cache: true
        self._entries: dict[str, ModelEntry] = {}
        self._report = report or (lambda versions: None)
        self.demand = demand or Demand()
        self._loads = asyncio.Lock()  # loads take turns: each one's memory growth is its own
        self._waking: dict[ModelVersion, asyncio.Future[None]] = {}  # on-demand loads running
        self._sizes: dict[tuple[str, str], int] = {}  # what each version held when last loaded

    # -- Registry protocol ---------------------------------------------------------------------

    def model_names(self) -> list[str]:
        return list(self._entries)

    def versions(self, name: str) -> list[ModelVersion] | None:
        entry = self._entries.get(name)
        return None if entry is None else entry.versions

    def version_for_label(self, name: str, label: str) -> str | None:
        entry = self._entries.get(name)
        if entry is None or entry.config is None:
            return None
        return entry.config.labels.get(label)

    def config(self, name: str) -> ModelConfig | None:
        entry = self._entries.get(name)
        return None if entry is None else entry.config

    # -- loading -------------------------------------------------------------------------------

    async def load_all(self) -> None:
        for model_dir in scan_repository(self.root).values():
            await self._add_model(model_dir)

    async def _add_model(self, model_dir: ModelDir) -> None:
        entry = _entry(model_dir)
        self._entries[model_dir.name] = entry
        await self._load_versions(entry, _wanted(entry))

    async def _load_versions(self, entry: ModelEntry, numbers: list[int]) -> None:
        fresh = [self._placeholder(entry, n) for n in numbers]
        entry.versions = sorted([*entry.versions, *fresh], key=lambda v: int(v.version))
        lazy = (entry.config.load if entry.config else None) or self.demand.mode
        for mv in fresh:
            if lazy == residency.LAZY and entry.config is not None:
                mv.state, mv.reason = VersionState.UNLOADED, residency.LAZY
            else:
                await self._load_one(entry, mv)
        if fresh:
            self._report(fresh)

    def _placeholder(self, entry: ModelEntry, number: int) -> ModelVersion:
        config = entry.config
        return ModelVersion(
            name=entry.dir.name,
            version=str(number),
            runtime=config.runtime if config else "?",
            inputs=list(config.inputs) if config else [],
            outputs=list(config.outputs) if config else [],
            max_batch_size=config.max_batch_size if config else 0,
            max_queue_size=config.max_queue_size if config else None,
            timeout_us=config.timeout_us if config else None,
            labels=[k for k, v in (config.labels if config else {}).items() if v == str(number)],
        )

    async def _load_one(self, entry: ModelEntry, mv: ModelVersion) -> None:
        """The one way a version loads (at start, on request, on demand): its memory measured,
        then held against the budget."""
        start = time.perf_counter()
        if entry.config is None:
            _fail(mv, entry.error)
        else:
            path = entry.dir.versions[int(mv.version)]
            async with self._loads:
                await self._make_room(mv, self._sizes.get((mv.name, mv.version), 0))
                before = residency.rss_bytes()
                try:
                    mv.class_labels = await run_loading(read_class_labels, entry.dir.path)
                    invoker = await run_loading(
                        _load_blocking, mv, path, entry.config, self._create
                    )
                except Exception as exc:  # any failure keeps the server and other models serving
                    _fail(mv, load_failure(exc), None if isinstance(exc, ConfigError) else exc)
                else:
                    if entry.config.response_cache and self._cache is not None:
                        assert mv.invoker is not None
                        mv.invoker = mv.answers = CachedInvoker(mv.invoker, self._cache, mv)
                        mv.response_cache = True
                    await _warm_up(mv, invoker, entry.dir.path, entry.config)
                    await self._hold(mv, residency.resident(mv, before))
        mv.load_seconds = time.perf_counter() - start

    # -- unloading -----------------------------------------------------------------------------

    async def unload_version(
        self, entry: ModelEntry, mv: ModelVersion, deadline: float | None = None
    ) -> None:
        """Stop routing to ``mv``, let requests in flight finish, then release it (by
        ``deadline``, monotonic time: a model's unload that outlasts it is left behind)."""
        entry.versions = [v for v in entry.versions if v is not mv]
        await self._release(mv, deadline or time.monotonic() + DRAIN_TIMEOUT_S)
        log.info("unloaded model %s version %s", mv.name, mv.version)

    async def _release(self, mv: ModelVersion, deadline: float) -> None:
        """The one way a version's model is released: drained, unloaded, its instances closed
        (asleep or not)."""
        mv.state, mv.asleep = VersionState.UNLOADING, False
        while mv.inflight and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if mv.model is not None:
            try:
                left = max(UNLOAD_MIN_S, deadline - time.monotonic())
                await within(run_loading(mv.model.unload), left)
            except TimeoutError:
                log.warning("unloading %s version %s did not finish in time", mv.name, mv.version)
            except Exception:
                log.exception("unloading %s version %s failed", mv.name, mv.version)
        if mv.instances is not None:
            mv.instances.close()

    async def unload_all(self, deadline: float | None = None) -> None:
        """Every version, all at once, each drained and released by ``deadline`` (monotonic)."""
        await asyncio.gather(
            *(
                self.unload_version(entry, mv, deadline)
                for entry in list(self._entries.values())
                for mv in list(entry.versions)
            )
        )
        self._entries.clear()

    # -- model control (on request) ------------------------------------------------------------

    def index(self) -> list[IndexEntry]:
        """Every model folder of the repository, loaded or not, with each served version."""
        rows: list[IndexEntry] = []
        for name in sorted(scan_repository(self.root)):
            entry = self._entries.get(name)
            if entry is None or not entry.versions:
                why = "unloaded" if entry is not None else "not loaded"
                rows.append(IndexEntry(name, "", VersionState.UNAVAILABLE.value, why))
                continue
            rows.extend(
                IndexEntry(name, v.version, v.state.value, v.reason, v.resident_bytes, v.asleep)
                for v in entry.versions
            )
        return rows

    async def load_model(self, name: str) -> None:
        """Load (or load anew) the model folder ``name`` of the repository."""
        model_dir = self._model_dir(name)
        entry = self._entries.get(name)
        if entry is None:
            await self._add_model(model_dir)
            failure = _failure(self._entries[name].versions)
        else:
            failure = await self._replace_model(entry, model_dir)
        for mv in list(self._entries[name].versions):  # asked for: lazy ones load too
            if not failure and mv.state is VersionState.UNLOADED:
                await self.wake(mv)
                failure = _failure([mv])
        if failure:
            raise ModelError(f"model '{name}' failed to load: {failure}")

    def _model_dir(self, name: str) -> ModelDir:
        """The folder a load request names. A name the file system refuses (too long, not
        encodable, ...) is the request's error, as an unknown folder is: never a traceback."""
        path = self.root / name
        found: ModelDir | None = None
        try:
            if not name.startswith(".") and path.is_dir():
                found = scan_model(path)
        except FileNotFoundError:  # removed since it was seen
            pass
        except (OSError, ValueError) as exc:  # said without the repository's path
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise InvalidInput(f"failed to load {shown_name(name)}: {why}") from None
        if found is None:
            raise ModelNotFound(f"no model folder {shown_name(name)} in the repository")
        return found

    async def unload_model(self, name: str) -> None:
        entry = self._entries.get(name)
        if entry is None:
            raise ModelNotFound(f"unknown model {shown_name(name)}")
        entry.unloaded = True
        for mv in list(entry.versions):
            await self.unload_version(entry, mv)

    # -- polling -------------------------------------------------------------------------------

    async def poll(self) -> None:
        """Bring the served set in line with the disk: new, removed and edited models/versions."""
        on_disk = scan_repository(self.root)
        for name in [n for n in self._entries if n not in on_disk]:
            gone = self._entries.pop(name)
            for mv in list(gone.versions):
                await self.unload_version(gone, mv)
        for name, model_dir in on_disk.items():
            entry = self._entries.get(name)
            if entry is None:
                await self._add_model(model_dir)
            elif entry.unloaded or entry.rejected == _disk_state(model_dir):
                continue
            elif model_dir.config_mtime != entry.dir.config_mtime:
                await self._replace_model(entry, model_dir)
            else:
                await self._sync_versions(entry, scan_model(model_dir.path))

    async def _sync_versions(self, entry: ModelEntry, model_dir: ModelDir) -> None:
        """Version folders came or went: load the new ones, then drop those the policy no
        longer wants -- unless a new one failed while the old ones serve (they keep serving)."""
        before, old_dir, entry.dir = list(entry.versions), entry.dir, model_dir
        wanted = set(_wanted(entry))
        have = {int(v.version): v for v in before}
        await self._load_versions(entry, sorted(wanted - set(have)))
        fresh = [v for v in entry.versions if v not in before]
        failure = _failure(fresh)
        if failure and any(v.ready for v in before):
            entry.versions, entry.dir = before, old_dir
            await self._reject(entry, fresh, model_dir, failure)
            return
        _accept(entry)
        for number in set(have) - wanted:
            await self.unload_version(entry, have[number])

    async def _replace_model(self, old: ModelEntry, model_dir: ModelDir) -> str:
        """model.yaml changed: load the new definition beside the old, then swap -- unless the
        new one failed while the old one serves (it keeps serving, as in TF Serving and
        Triton). Returns why the new definition failed ("" if it loaded)."""
        staged = _entry(model_dir)
        await self._load_versions(staged, _wanted(staged))
        failure = _failure(staged.versions)
        if failure and any(v.ready for v in old.versions):
            await self._reject(old, staged.versions, model_dir, failure)
            return failure
        self._entries[model_dir.name] = staged
        for mv in list(old.versions):
            await self.unload_version(old, mv)
        return failure

    async def _reject(
        self, entry: ModelEntry, staged: list[ModelVersion], model_dir: ModelDir, failure: str
    ) -> None:
        """Keep ``entry`` serving as it was, release what was loaded of the failed edit, and say
        why on the serving versions (their metadata, the repository index) and in the log."""
        for mv in staged:
            if mv.ready:  # loaded, though another version of the edit failed
                await self.unload_version(entry, mv)
        entry.rejected = _disk_state(model_dir)
        served = ", ".join(v.version for v in entry.versions if v.ready)
        log.error(
            "model %s: the edited model folder failed to load, version(s) %s keep serving "
            "until it is fixed: %s",
            entry.dir.name,
            served,
            failure,
        )
        for mv in entry.versions:
            if mv.ready:
                mv.reason = f"{RELOAD_FAILED}: {failure}"

    async def poll_forever(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self.poll()
            except Exception:
                log.exception("polling the model repository failed")


def _accept(entry: ModelEntry) -> None:
    """The folder as it is now loaded: a failed edit's note on the serving versions goes."""
    if entry.rejected:
        entry.rejected = ()
        for mv in entry.versions:
            if mv.ready and mv.reason.startswith(RELOAD_FAILED):
                mv.reason = ""


def _failure(versions: list[ModelVersion]) -> str:
    """Why the first of ``versions`` that did not load failed ("" if they all loaded, or load
    on demand)."""
    return next((v.reason for v in versions if v.state is VersionState.UNAVAILABLE), "")


def _disk_state(model_dir: ModelDir) -> tuple[float, ...]:
    """What an edit of a model folder changes: model.yaml (its time, size and file), the version
    numbers and each version folder's time (files added, removed or replaced in it)."""
    state: list[float] = []
    for number, path in [(0, model_dir.path / CONFIG_FILE), *sorted(model_dir.versions.items())]:
        try:
            found = os.stat(path)
            state += [number, found.st_mtime_ns, found.st_size, found.st_ino]
        except OSError:
            state += [number, -1, -1, -1]
    return tuple(state)


def _entry(model_dir: ModelDir) -> ModelEntry:
    try:
        return ModelEntry(model_dir, read_config(model_dir.path))
    except Exception as exc:
        return ModelEntry(model_dir, None, str(exc))


def _wanted(entry: ModelEntry) -> list[int]:
    numbers = list(entry.dir.versions)
    return entry.config.version_policy.select(numbers) if entry.config else [max(numbers)]


def _load_blocking(
    mv: ModelVersion, path: Path, config: ModelConfig, create: ModelFactory
) -> Invoker:
    """The version loaded, and its own invoker (its warmup's way in); READY after the warmup."""
    model = _create(mv, path, config, create)
    model.load()
    if not model.inputs or not model.outputs:
        raise ValueError(
            f"runtime {config.runtime} cannot tell this model's signature: "
            "declare 'inputs' and 'outputs' in model.yaml (or set them in load())"
        )
    mv.inputs, mv.outputs = list(model.inputs), list(model.outputs)
    mv.platform, mv.max_batch_size = model.platform, model.max_batch_size
    if isinstance(model, ProcessModel):
        mv.instances, invoker = model.pool, Invoker(model)
    else:
        threads = ThreadInstances(f"{mv.name}-v{mv.version}", _instances(config))
        mv.instances, invoker = threads, Invoker(model, threads)
    if config.response_cache and invoker.streams:  # (Triton refuses such a config too)
        model.unload()
        mv.instances.close()
        mv.instances = None
        raise ValueError(
            "response_cache: the response cache does not serve a model that streams its "
            "responses (each request's answer is a stream): set it to false"
        )
    if config.sequence_batching is not None:
        lanes = _instances(config)
        mv.model, mv.invoker = (
            model,
            schedule_sequences(mv, invoker, config.sequence_batching, lanes),
        )
    else:
        mv.model, mv.invoker = model, schedule(mv, invoker, config.dynamic_batching)
    return invoker


async def _warm_up(
    mv: ModelVersion, invoker: Invoker, model_dir: Path, config: ModelConfig
) -> None:
    """The warmup samples run, then the version is READY; a failing one fails the load (the
    model unloaded again)."""
    try:
        if config.warmup:
            batched = mv.max_batch_size > 0
            arrays = [
                await run_loading(sample_arrays, sample, model_dir, batched)
                for sample in config.warmup
            ]
            await warm_up(invoker, config.warmup, arrays)
    except WarmupFailed as exc:
        _fail(mv, str(exc))
        assert mv.model is not None
        await run_loading(mv.model.unload)
        if mv.instances is not None:
            mv.instances.close()
        mv.model = mv.invoker = mv.instances = mv.answers = None
        return
    mv.state = VersionState.READY


def _create(mv: ModelVersion, path: Path, config: ModelConfig, create: ModelFactory) -> Model:
    if config.isolation == "process" and config.runtime == "python":  # (torchserve: its own)
        return ProcessModel(mv.name, mv.version, path, config.raw, _instances(config))
    return create(mv.name, mv.version, path, config)


def _instances(config: ModelConfig) -> int:
    if config.instances is not None:
        return config.instances
    return (os.cpu_count() or 1) if config.runtime in PARALLEL_RUNTIMES else 1


def _fail(mv: ModelVersion, reason: str, exc: Exception | None = None) -> None:
    """``exc``: what the model's code raised, its traceback logged (the reason says it short)."""
    mv.state, mv.reason = VersionState.UNAVAILABLE, reason
    log.error("model %s version %s failed to load: %s", mv.name, mv.version, reason, exc_info=exc)


def load_failure(exc: Exception) -> str:
    """Why a load failed, as the model's reason says it: the message alone when it already says
    everything, else prefixed with the type of the error."""
    if isinstance(exc, ConfigError | ValueError | FileNotFoundError | ModelError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
