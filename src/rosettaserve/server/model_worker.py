"""One execution instance of a python model with ``isolation: process``: the model, loaded in a
process of its own, answering one call at a time on its control channel (like the stub process of
Triton's python backend). A call that outlives its timeout has this process killed and replaced.

    python -m rosettaserve.server.model_worker FD     (started by the server only)

Messages: ``("load", name, version, path, model.yaml as read)`` -> ``("loaded", inputs, outputs,
platform, max_batch_size)`` or ``("failed", why)``; then ``("predict", inputs, parameters)`` ->
``("ok", outputs)`` or ``("error", ServingError)``, until the server closes the channel.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from rosettaserve.core.errors import ModelError, served_as
from rosettaserve.core.invoker import Invoker
from rosettaserve.core.model import Model
from rosettaserve.repository.config import parse_config
from rosettaserve.repository.manager import load_failure
from rosettaserve.runtimes import create_model
from rosettaserve.scheduling.channel import die_with, receive_blocking, send_blocking


def main(argv: list[str]) -> int:
    parent = os.getppid()
    die_with(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the server, which decides
    sock = socket.socket(fileno=int(argv[0]))
    try:
        _, name, version, path, raw = receive_blocking(sock)
        model, invoker = _load(name, version, Path(path), raw)
    except EOFError:
        return 0
    except Exception as exc:  # any failure is the load's: the server says why
        send_blocking(sock, "failed", load_failure(exc))
        return 1
    send_blocking(sock, "loaded", model.inputs, model.outputs, model.platform, model.max_batch_size)
    _serve(sock, invoker)
    model.unload()
    return 0


def _load(name: str, version: str, path: Path, raw: dict[str, Any]) -> tuple[Model, Invoker]:
    model = create_model(name, version, path, parse_config(raw))
    model.load()
    invoker = Invoker(model)
    if invoker.streams:
        raise ValueError(
            "a streaming model (predict is a generator) cannot run with 'isolation: process'"
        )
    return model, invoker


def _serve(sock: socket.socket, invoker: Invoker) -> None:
    loop = asyncio.new_event_loop() if invoker.is_async else None
    while True:
        try:
            _, inputs, parameters = receive_blocking(sock)
        except (EOFError, OSError):  # the server closed the channel (or died): stop
            return
        try:
            result = invoker.fn(inputs, **invoker.kwargs(parameters))
            if loop is not None:
                result = loop.run_until_complete(result)
            reply: tuple[Any, ...] = ("ok", result)
        except Exception as exc:
            reply = ("error", served_as(exc, invoker.label) or exc)
        try:
            send_blocking(sock, *reply)
        except (pickle.PicklingError, TypeError, AttributeError, ValueError) as exc:
            error = ModelError(f"the model's answer cannot be sent back to the server: {exc}")
            send_blocking(sock, "error", error)
        except OSError:  # the server has gone
            return


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
