"""``isolation: process`` in model.yaml: a python model served from worker processes
(``scheduling.model_worker``), one call at a time each, ``instances`` of them.

A call that is cancelled -- its request timed out, or its client went away -- has its worker
killed at once, so the work really stops, and a fresh worker loaded in its place. Tensors cross
the process boundary as pickle protocol 5 with their data out of band (``scheduling.channel``).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter_ns
from typing import Any

from rosettaserve.core.call import Call
from rosettaserve.core.errors import ModelError
from rosettaserve.core.executor import run_loading
from rosettaserve.core.model import Arrays, Model
from rosettaserve.scheduling.channel import (
    child_process,
    receive_async,
    receive_blocking,
    send_async,
    send_blocking,
)

log = logging.getLogger("rosettaserve.isolation")
STOP_WAIT_S = 5.0  # a worker told to stop gets this long to unload, then it is killed
RESPAWN_DELAY_S = 1.0  # first wait before another attempt to replace a worker that failed to
RESPAWN_DELAY_MAX_S = 60.0  # load its model, doubled after each failure up to this


@dataclass(eq=False)
class WorkerProcess:
    proc: subprocess.Popen[bytes]
    sock: socket.socket  # this end of its control channel


class ProcessInstances:
    """``count`` worker processes, each holding the model loaded, taken one call at a time."""

    def __init__(self, label: str, count: int, load: tuple[Any, ...]) -> None:
        self.label = label
        self._count = count
        self._load = load  # the first message every worker gets
        self._idle: asyncio.Queue[WorkerProcess] = asyncio.Queue()
        self.workers: set[WorkerProcess] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.running: dict[WorkerProcess, Call] = {}  # a worker in a call that has a deadline
        # Each worker's place (a replacement takes its predecessor's): a call whose
        # ``instance`` is set runs in the worker at that place, never another -- a sequence
        # batcher's lane, whose sequences' state may live in that process.
        self.places: list[WorkerProcess | None] = []
        self.closed = False

    @property
    def count(self) -> int:
        return self._count

    def overdue(self, now: float) -> list[Call]:
        """A call past its deadline is stopped: usually its request's timeout has cancelled it
        already; a batch's call (which nothing cancels) is stopped here."""
        for worker, call in list(self.running.items()):
            if call.deadline is not None and call.deadline < now and worker in self.workers:
                self._retire(worker, "its call outlived its request timeout")
        return []

    def close(self) -> None:
        self.closed = True  # (the model's unload stops the workers)

    # -- on the loading threads ----------------------------------------------------------------

    def start_blocking(self) -> tuple[Any, ...]:
        """Start every worker and wait until each has loaded the model; what the first said."""
        started = [self._spawn_blocking() for _ in range(self._count)]
        try:
            replies = [self._loaded_blocking(worker) for worker in started]
        except Exception:
            for worker in started:
                _stop(worker, 0.0)
            raise
        for worker in started:
            self.workers.add(worker)
            self._idle.put_nowait(worker)
        self.places = list(started)
        return replies[0]

    def stop_blocking(self) -> None:
        """Tell every worker to stop (it unloads its model); kill those that do not."""
        self.closed = True
        workers = list(self.workers)
        for worker in workers:
            worker.sock.close()  # all told at once: they unload side by side
        deadline = time.monotonic() + STOP_WAIT_S
        for worker in workers:
            _stop(worker, max(0.0, deadline - time.monotonic()))
        self.workers.clear()

    def _spawn_blocking(self) -> WorkerProcess:
        mine, theirs, cmd = child_process("rosettaserve.server.model_worker")
        try:
            proc = subprocess.Popen(cmd, pass_fds=(theirs.fileno(),))
        finally:
            theirs.close()
        send_blocking(mine, *self._load)
        return WorkerProcess(proc, mine)

    def _loaded_blocking(self, worker: WorkerProcess) -> tuple[Any, ...]:
        """The worker's answer to its load: ``("loaded", ...)``, or an error saying why not."""
        try:
            reply = receive_blocking(worker.sock)
        except (EOFError, OSError):
            reply = ("failed", f"its worker process exited (code {worker.proc.wait()})")
        if reply[0] != "loaded":
            _stop(worker, 0.0)
            raise ModelError(str(reply[1]))
        worker.sock.setblocking(False)  # from now on, the event loop talks to it
        return reply

    def _replace_blocking(self, old: WorkerProcess) -> WorkerProcess | None:
        old.proc.wait()  # (killed already: reaped here, so that its PID is gone)
        old.sock.close()
        delay = RESPAWN_DELAY_S
        while not self.closed:
            worker = self._spawn_blocking()
            try:
                self._loaded_blocking(worker)
            except Exception as exc:
                log.error("%s: a new worker process failed to load the model: %s", self.label, exc)
                time.sleep(delay)
                delay = min(2 * delay, RESPAWN_DELAY_MAX_S)
                continue
            return worker
        return None

    # -- on the event loop ---------------------------------------------------------------------

    async def predict(self, inputs: Arrays, parameters: dict[str, Any], call: Call | None) -> Any:
        instance = -1 if call is None else call.instance
        pinned = instance >= 0
        worker = self._pinned(instance) if pinned else await self._idle.get()
        if call is not None:
            call.ran = perf_counter_ns()  # (before: it waited for a free worker)
            if call.deadline is not None:
                self.running[worker] = call
        try:
            await send_async(worker.sock, "predict", inputs, parameters)
            reply = await receive_async(worker.sock)
        except ConnectionError:  # it died while idle
            reply = None
        except BaseException:  # cancelled (a timeout, a client gone): the work must stop
            if worker in self.workers:
                self._retire(worker, "its call was cancelled: its request timed out or went away")
            raise
        finally:
            self.running.pop(worker, None)
        if reply is None:
            if worker not in self.workers:  # stopped by ``overdue``
                raise ModelError(f"{self.label}: the call outlived its timeout and was stopped")
            code = worker.proc.poll()
            self._retire(worker, f"it exited during a call (code {code})")
            raise ModelError(f"{self.label}: its worker process exited during the call")
        if not pinned:  # (a pinned worker never left the idle queue)
            self._idle.put_nowait(worker)
        if reply[0] == "ok":
            return reply[1]
        raise reply[1]

    def _pinned(self, instance: int) -> WorkerProcess:
        """The worker at place ``instance``: its lane runs one call at a time, and nothing
        else calls a version that pins its calls once it serves (its warmup ran before)."""
        worker = self.places[instance % len(self.places)] if self.places else None
        if worker is None or worker not in self.workers:
            raise ModelError(
                f"{self.label}: the worker process of instance {instance} was stopped (the "
                "state it held is gone) and is being replaced"
            )
        return worker

    def _retire(self, worker: WorkerProcess, why: str) -> None:
        """Kill ``worker`` now and start another in its place."""
        worker.proc.kill()
        self.workers.discard(worker)
        log.warning("%s: killed worker process %d (%s)", self.label, worker.proc.pid, why)
        if not self.closed:
            task = asyncio.create_task(self._replace(worker))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _replace(self, old: WorkerProcess) -> None:
        fresh = await run_loading(self._replace_blocking, old)
        if fresh is None:
            return
        if self.closed:
            await run_loading(_stop, fresh, 0.0)
            return
        self.workers.add(fresh)
        self._idle.put_nowait(fresh)
        self.places = [fresh if w is old else w for w in self.places]
        log.info(
            "%s: worker process %d took the place of %d", self.label, fresh.proc.pid, old.proc.pid
        )


def _stop(worker: WorkerProcess, wait_s: float) -> None:
    worker.sock.close()  # the worker reads the end of its channel: it unloads and exits
    try:
        worker.proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        worker.proc.kill()
        worker.proc.wait()


class ProcessModel(Model):
    """The server's side of a model served with ``isolation: process``: its signature, as the
    workers loaded it, and an async ``predict`` that hands each call to a free worker."""

    def __init__(
        self, name: str, version: str, path: Path, raw: dict[str, Any], count: int
    ) -> None:
        super().__init__(name, version, path, raw)
        self.pool = ProcessInstances(
            f"model {name} version {version}", count, ("load", name, version, str(path), raw)
        )

    def load(self) -> None:
        _, inputs, outputs, platform, max_batch_size = self.pool.start_blocking()
        self.inputs, self.outputs = list(inputs), list(outputs)
        self.platform, self.max_batch_size = platform, max_batch_size

    def unload(self) -> None:
        self.pool.stop_blocking()

    takes_call = True  # the invoker hands it the call: its deadline

    async def predict(
        self, inputs: Arrays, parameters: dict[str, Any] | None = None, call: Call | None = None
    ) -> Any:
        return await self.pool.predict(inputs, parameters or {}, call)
