"""``isolation: process`` for an archive: each worker's handler in a process of its own, as
TorchServe runs its workers, so that workers run side by side (the handler threads of one
process take turns on its GIL) and hold their own module state.

The worker threads (``workers.Workers``) stay in the server and batch as before; a ``Remote``
hands a batch to its process and waits for the answer on the channel (the GIL free meanwhile),
passing on each intermediate answer as it comes. A process that dies fails its batch as a
handler that raised (503) and is started again before the next one.

    python -m rosettaserve.runtimes.torchserve.process FD     (started by the server only)

Messages: ``("load", name, folder, manifest, batch_size)`` -> ``("loaded",)`` or ``("failed",
why)``; then ``("predict", requests)`` -> ``("frame", Frame)`` for each intermediate answer,
``("done", Frame)``; until the server closes the channel.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from rosettaserve.core.errors import ModelError
from rosettaserve.protocols.torchserve.wire import TsRequest
from rosettaserve.runtimes.torchserve import frames, predict
from rosettaserve.runtimes.torchserve.mar import Archive
from rosettaserve.runtimes.torchserve.service import FrameSocket
from rosettaserve.scheduling.channel import (
    child_process,
    die_with,
    receive_blocking,
    send_blocking,
)

log = logging.getLogger("rosettaserve.torchserve")
STOP_WAIT_S = 5.0  # a process told to stop gets this long, then it is killed


class Remote:
    """A handler in a process of its own; ``predict`` as ``predict.Handler``'s."""

    runs_here = False  # a call waits on the process: never on the event loop

    def __init__(self, name: str, archive: Archive, batch_size: int) -> None:
        self.load = ("load", name, str(archive.folder), archive.manifest, batch_size)
        self.proc, self.sock = self._start()

    def _start(self) -> tuple[subprocess.Popen[bytes], socket.socket]:
        """(Linux ends the child when the thread that started it ends: the loading threads,
        the default executor's and the worker's own, each outliving its process.)"""
        mine, theirs, cmd = child_process(__name__)
        try:
            proc = subprocess.Popen(cmd, pass_fds=(theirs.fileno(),))
        finally:
            theirs.close()
        try:
            send_blocking(mine, *self.load)
            reply = receive_blocking(mine)
        except (EOFError, OSError):
            reply = ("failed", f"its worker process exited (code {proc.wait()})")
        if reply[0] != "loaded":
            _stop(proc, mine, 0.0)
            raise ModelError(str(reply[1]))
        return proc, mine

    def predict(self, requests: list[TsRequest], socket: FrameSocket) -> frames.Frame:
        try:
            send_blocking(self.sock, "predict", requests)
            while True:
                kind, frame = receive_blocking(self.sock)
                if kind == "done":
                    return frame  # type: ignore[no-any-return]
                socket.on_frame(frame)
        except (EOFError, OSError):
            code = self.proc.poll()
            log.warning("a handler's worker process exited (code %s): started again", code)
            _stop(self.proc, self.sock, 0.0)
            self.proc, self.sock = self._start()
            raise

    def close(self) -> None:
        _stop(self.proc, self.sock, STOP_WAIT_S)


def _stop(proc: subprocess.Popen[bytes], sock: socket.socket, wait_s: float) -> None:
    sock.close()  # the process reads the end of its channel and exits
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main(argv: list[str]) -> int:
    die_with(os.getppid())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the server, which decides
    sock = socket.socket(fileno=int(argv[0]))
    try:
        _, name, folder, manifest, batch_size = receive_blocking(sock)
        handler = predict.load(name, Archive(Path(folder), manifest, False), batch_size)
    except EOFError:
        return 0
    except Exception as exc:  # any failure is the load's: the server says why
        send_blocking(sock, "failed", f"{type(exc).__name__}: {exc}")
        return 1
    send_blocking(sock, "loaded")
    frame_socket = FrameSocket(lambda frame: send_blocking(sock, "frame", frame))
    while True:
        try:
            _, requests = receive_blocking(sock)
        except (EOFError, OSError):  # the server closed the channel (or died): stop
            return 0
        try:
            answer: Any = handler.predict(requests, frame_socket)
        except Exception:  # a frame the handler broke: as a handler that raised
            answer = frames.Frame(503, "Prediction failed", [])
        send_blocking(sock, "done", answer)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
