"""One worker process of ``--workers N``: a whole server (its own models, loaded once) on ports it
shares with the other workers (SO_REUSEPORT), linked to the supervisor by a control channel.

    python -m rosettaserve.server.worker FD INDEX     (started by the supervisor only)
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import sys
from collections.abc import Callable
from typing import Any

from rosettaserve.core.timeouts import within
from rosettaserve.observability.metrics import Snapshot, render
from rosettaserve.scheduling.channel import Channel, receive_blocking

COLLECT_TIMEOUT_S = 15.0


class WorkerLink:
    """The worker's side of the control channel, as the server sees it."""

    def __init__(self, sock: socket.socket, index: int, replacement: bool = False) -> None:
        self.index = index
        self.replacement = replacement  # for a worker that died, after the server became ready
        self._sock = sock
        self._channel: Channel | None = None
        self._ready: asyncio.Event | None = None
        self._replies: dict[int, asyncio.Future[list[Snapshot]]] = {}
        self._ids = itertools.count()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, snapshot: Callable[[], Snapshot], stop: Callable[[], None]) -> None:
        self._ready = asyncio.Event()
        self._channel = await Channel.open(self._sock)
        task = asyncio.create_task(self._read(self._channel, snapshot, stop))
        self._tasks.add(task)

    async def loaded(self) -> None:
        """Tell the supervisor this worker's models are loaded; return once every worker's are."""
        assert self._channel is not None
        assert self._ready is not None
        self._channel.send("loaded")
        await self._ready.wait()

    async def collect(self) -> bytes:
        """The metrics of every worker, summed."""
        return render(await self.snapshots())

    async def snapshots(self) -> list[Snapshot]:
        """Every worker's snapshot (the supervisor asks each for one)."""
        assert self._channel is not None
        rid = next(self._ids)
        reply: asyncio.Future[list[Snapshot]] = asyncio.get_running_loop().create_future()
        self._replies[rid] = reply
        self._channel.send("collect", rid)
        try:
            return await within(reply, COLLECT_TIMEOUT_S)
        finally:
            self._replies.pop(rid, None)

    async def _read(
        self, channel: Channel, snapshot: Callable[[], Snapshot], stop: Callable[[], None]
    ) -> None:
        while (message := await channel.receive()) is not None:
            kind = message[0]
            if kind == "ready" and self._ready is not None:
                self._ready.set()
            elif kind == "snapshot":
                channel.send("snapshot", message[1], snapshot())
            elif kind == "collected":
                reply = self._replies.get(message[1])
                if reply is not None and not reply.done():
                    reply.set_result(message[2])
        stop()  # the supervisor has gone: so does this worker (after draining)


def main(argv: list[str]) -> int:
    import uvloop

    from rosettaserve.server import gc_tuning, malloc_tuning

    gc_tuning.pause()  # until its models are loaded (its Server settles it)
    malloc_tuning.tune()

    from rosettaserve.observability import logging_setup
    from rosettaserve.server.server import Server

    fd, index = int(argv[0]), int(argv[1])
    sock = socket.socket(fileno=fd)
    message: Any = receive_blocking(sock)
    settings, replacement = message[1], message[2]
    logging_setup.configure(settings.log_level, settings.log_format, tag=f"worker {index}")
    try:
        uvloop.run(Server(settings, WorkerLink(sock, index, replacement)).run())
    except (OSError, RuntimeError) as exc:  # a port taken: OSError (HTTP), RuntimeError (gRPC)
        print(f"rosettaserve worker {index}: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
