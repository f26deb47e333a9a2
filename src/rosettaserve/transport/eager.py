"""Run a handler at once, up to its first wait, and hand what is left of it to a task.

Most calls to a fast model never wait: answered in the read callback, they cost no task. One
that does wait is ``Adopted`` by a task, which resumes it where it stopped.
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Adopted(Generic[T]):
    """A coroutine that has already run up to its first wait, made awaitable again: the task
    that awaits it receives that wait first, then drives the coroutine on (sends, throws and
    closes go through to it, as ``await`` would)."""

    def __init__(self, coroutine: Coroutine[Any, Any, T], waits_for: Any) -> None:
        self.coroutine, self.waits_for = coroutine, waits_for

    def __await__(self) -> Generator[Any, Any, T]:
        coroutine, step = self.coroutine, self.waits_for
        while True:
            try:
                sent = yield step
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as exc:  # cancellation too: it goes through
                try:
                    step = coroutine.throw(exc)
                except StopIteration as finished:
                    return finished.value  # type: ignore[no-any-return]
            else:
                try:
                    step = coroutine.send(sent)
                except StopIteration as finished:
                    return finished.value  # type: ignore[no-any-return]
