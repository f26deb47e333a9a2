"""What a gRPC servicer sees of its call (the part of grpc's ServicerContext used here), and how
it ends the call with a status of its own (``abort``: ``grpc_call`` writes it as the trailers)."""

from __future__ import annotations

import time
from typing import Any, NoReturn


class Aborted(Exception):
    """``context.abort``: the call ends with this status."""

    def __init__(self, code: int, details: str, trailing: tuple[tuple[str, str], ...]) -> None:
        super().__init__(details)
        self.code, self.details, self.trailing = code, details, trailing


class Context:
    """What a servicer may ask of its call (the part of grpc's ServicerContext used here)."""

    __slots__ = ("deadline", "metadata")

    def __init__(self, deadline: float | None, metadata: tuple[tuple[str, str], ...]) -> None:
        self.deadline = deadline  # time.monotonic()
        self.metadata = metadata

    def time_remaining(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    async def abort(self, code: Any, details: str = "", trailing_metadata: Any = ()) -> NoReturn:
        value = code.value[0] if hasattr(code, "value") else int(code)
        raise Aborted(value, details, tuple(trailing_metadata))
