"""A future whose waiter may be resumed from the future's own callback instead of by a task.

A batched request waits for its batch's result (scheduling/batcher.py). A server that ran the
request's handler outside a task up to that wait (the HTTP/1.1 server's first step: see
transport/eager.py) may drive the handler on from this future's done callback: the handler's
rest (the answer's encoding, its write) then runs as a task's step would, without a task made
for it and woken. Only the server's own code runs between such a wait and the answer, and none
of it asks for the current task (an asyncio timeout does: a request with a deadline waits for
one first), which is why a model's own futures are never driven this way.

It stays a plain asyncio future to every other waiter (a task awaits it as any other).
Not compiled (scripts/compile_native.py): mypyc cannot compile a subclass of asyncio's C future.
"""

from __future__ import annotations

import asyncio
from typing import Any


class Resumable(asyncio.Future[Any]):
    __slots__ = ()
