"""The tiny example Llama loaded in the test process, for the engine's unit tests, and the
reading of a generation stream to its end (any engine's)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from rosettaserve.runtimes.llm import LlmModel
from rosettaserve.runtimes.llm.engine import Engine
from tests.conftest import EXAMPLES


def load_llm(**parameters: Any) -> LlmModel:
    """The model with these model.yaml parameters (one torch thread), its engine running."""
    model = LlmModel(
        name="tiny_llama",
        path=EXAMPLES / "tiny_llama",
        config={"parameters": {"threads": 1, **parameters}},
    )
    model.load()
    return model


@contextlib.contextmanager
def held_engine(**parameters: Any) -> Iterator[LlmModel]:
    """The model with its engine thread not started yet: whatever is submitted before
    ``llm.engine.start()`` is waiting when the thread first admits requests, so it sees all of
    it at once, however the threads are scheduled."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Engine, "start", lambda self: None)
        model = load_llm(**parameters)
    try:
        yield model
    finally:
        with contextlib.suppress(RuntimeError):  # the test started it already
            model.engine.start()
        model.unload()


async def drain(stream: AsyncIterator[Any]) -> BaseException | None:
    """Read ``stream`` to its end: the error it ended with, or None."""
    try:
        async for _ in stream:
            pass
    except Exception as exc:
        return exc
    return None
