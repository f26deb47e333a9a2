"""Writes of one round of reads leave together.

What the connections answered while the event loop handled one round of reads is written once
that round is over, each connection's in one write. Written at once, each answer would wake the
client's side of the socket on its own; on a virtual machine a wake-up of a task on another CPU
costs an interrupt between CPUs, a large share of the server's time under 16 connections of small
requests [cost: write-round].
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

log = logging.getLogger("rosettaserve.transport")


class Flushable(Protocol):
    def flush(self) -> None:
        """Write what is waiting."""

    def abort(self) -> None:
        """Drop the connection (its flush failed)."""


class WriteRound:
    """The connections with something to write at the end of this round."""

    def __init__(self) -> None:
        self._waiting: list[Flushable] = []

    def add(self, conn: Flushable) -> None:
        """``conn`` has answers to write: with the others', once the loop is done with this
        round of reads (a callback queued now runs after the round's other read callbacks).
        Call it when ``conn`` goes from nothing waiting to something waiting."""
        self._waiting.append(conn)
        if len(self._waiting) == 1:
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        waiting, self._waiting = self._waiting, []
        for conn in waiting:
            try:
                conn.flush()
            except Exception:  # one connection's failure must not keep the others' answers
                log.exception("writing the answers of a connection failed; closing it")
                conn.abort()
