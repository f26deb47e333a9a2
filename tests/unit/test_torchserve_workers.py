"""Where TorchServe handlers run: a cheap handler of this process on the event loop, the rest on
the worker threads (runtimes/torchserve/workers.py)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from rosettaserve.core import invoker as invoker_module
from rosettaserve.protocols.torchserve.wire import Parameter, TsAnswer, TsRequest
from rosettaserve.runtimes.torchserve import frames
from rosettaserve.runtimes.torchserve.service import FrameSocket
from rosettaserve.runtimes.torchserve.workers import PROBE_CEILING, PROBE_EVERY, Workers


class Recorder:
    """A handler answering each request's body back, noting the thread of each call."""

    def __init__(
        self, runs_here: bool = True, pause_s: float = 0.0, chunks: int = 0, on_threads_s: float = 0
    ) -> None:
        self.runs_here = runs_here
        self.pause_s = pause_s
        self.on_threads_s = on_threads_s  # a pause taken on worker threads only
        self.chunks = chunks  # intermediate answers sent before the last one
        self.threads: list[int] = []
        self.batches: list[int] = []
        self.pauses_s: list[float] = []  # the first calls' pauses, in turn (then pause_s)

    def predict(self, requests: list[TsRequest], socket: FrameSocket) -> frames.Frame:
        self.threads.append(threading.get_ident())
        self.batches.append(len(requests))
        pause_s = self.pauses_s.pop(0) if self.pauses_s else self.pause_s
        if pause_s:
            time.sleep(pause_s)
        if self.on_threads_s and threading.current_thread() is not threading.main_thread():
            time.sleep(self.on_threads_s)
        stream = {"ts_stream_next": "true"}
        for n in range(self.chunks):
            socket.on_frame(frames.Frame(200, "", [_reply(f"part{n}".encode(), stream)]))
        last = {"ts_stream_next": "false"} if self.chunks else {}
        return frames.Frame(200, "", [_reply(r.parameters[0].value, last) for r in requests])

    def close(self) -> None:
        """Nothing held."""


def _reply(body: bytes, headers: dict[str, str]) -> frames.Reply:
    return frames.Reply("id", "text/plain", 200, "OK", dict(headers), body)


def _request(n: int) -> TsRequest:
    return TsRequest([Parameter("body", "text/plain", str(n).encode())])


async def _body(answer: TsAnswer) -> bytes:
    if answer.stream is None:
        return answer.body
    return answer.body + b"".join([chunk async for chunk in answer.stream])


def serve(workers: Workers, count: int, at_once: int = 1) -> tuple[int, list[bytes]]:
    """The event loop's thread and the bodies answered to ``count`` requests, ``at_once`` of
    them in flight together."""

    async def main() -> tuple[int, list[bytes]]:
        bodies: list[bytes] = []
        for start in range(0, count, at_once):
            numbers = range(start, min(count, start + at_once))
            answers = await asyncio.gather(*(workers.serve(_request(n)) for n in numbers))
            bodies += [await _body(a) for a in answers]
        workers.stop()
        return threading.get_ident(), bodies

    return asyncio.run(main())


@pytest.fixture
def generous(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(invoker_module, "INLINE_NS", 5_000_000)  # 50 ms for a handler


@pytest.mark.usefixtures("generous")
def test_a_cheap_handler_moves_to_the_event_loop_thread() -> None:
    handler = Recorder()

    loop_thread, bodies = serve(Workers([handler], 1, 100), PROBE_EVERY + 10)

    assert bodies == [str(n).encode() for n in range(PROBE_EVERY + 10)]
    assert handler.threads[0] != loop_thread  # unknown at first: a worker thread
    assert handler.threads[PROBE_EVERY - 1] == loop_thread  # the first probe: cheap
    assert handler.threads[-10:] == [loop_thread] * 10


@pytest.mark.usefixtures("generous")
def test_a_streamed_answer_called_on_the_event_loop_keeps_its_parts() -> None:
    handler = Recorder(chunks=2)

    loop_thread, bodies = serve(Workers([handler], 1, 100), PROBE_EVERY + 10)

    assert handler.threads[-1] == loop_thread
    assert bodies == [f"part0part1{n}".encode() for n in range(PROBE_EVERY + 10)]


def test_a_slow_handler_stays_on_the_worker_threads_but_for_its_probes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(invoker_module, "INLINE_NS", 100_000)  # 1 ms for a handler
    handler = Recorder(pause_s=0.003)

    loop_thread, _ = serve(Workers([handler], 1, 100), 2 * PROBE_EVERY + 10)

    on_loop = [i + 1 for i, thread in enumerate(handler.threads) if thread == loop_thread]
    assert on_loop == [PROBE_EVERY, 2 * PROBE_EVERY]


def test_calls_on_the_worker_threads_are_not_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker thread's call also counts the time it waited for the GIL (under load, every
    handler would look slow): a handler slow on the threads only still moves to the loop."""
    monkeypatch.setattr(invoker_module, "INLINE_NS", 500_000)  # 5 ms for a handler
    handler = Recorder(on_threads_s=0.01)

    loop_thread, _ = serve(Workers([handler], 1, 100), PROBE_EVERY + 10)

    assert handler.threads[-10:] == [loop_thread] * 10


@pytest.mark.usefixtures("generous")
def test_a_handler_in_a_process_of_its_own_is_never_called_on_the_event_loop() -> None:
    handler = Recorder(runs_here=False)

    loop_thread, bodies = serve(Workers([handler], 1, 100), PROBE_EVERY + 10)

    assert bodies == [str(n).encode() for n in range(PROBE_EVERY + 10)]
    assert loop_thread not in handler.threads


@pytest.mark.usefixtures("generous")
def test_batched_requests_stay_on_the_worker_threads_and_are_batched() -> None:
    handler = Recorder()

    loop_thread, bodies = serve(Workers([handler], 4, 1000), 40, at_once=4)

    assert bodies == [str(n).encode() for n in range(40)]
    assert loop_thread not in handler.threads
    assert max(handler.batches) == 4


def test_zero_threshold_keeps_every_call_on_the_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(invoker_module, "INLINE_NS", 0)
    handler = Recorder()

    loop_thread, _ = serve(Workers([handler], 1, 100), PROBE_EVERY + 10)

    assert loop_thread not in handler.threads


def test_a_handler_once_too_slow_on_the_loop_is_never_tried_there_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cheap handler whose call on the loop once took PROBE_CEILING bounds (it waited on
    something) stays on the threads: a probe would stall every client of the loop again."""
    monkeypatch.setattr(invoker_module, "INLINE_NS", 10_000)  # 100 us for a handler
    ceiling_s = PROBE_CEILING * 100e-6
    handler = Recorder()
    handler.pauses_s = [0.0] * (PROBE_EVERY - 1) + [1.5 * ceiling_s]  # the first probe waits

    loop_thread, bodies = serve(Workers([handler], 1, 100), 3 * PROBE_EVERY + 10)

    on_loop = [i + 1 for i, thread in enumerate(handler.threads) if thread == loop_thread]
    assert on_loop == [PROBE_EVERY]
    assert len(bodies) == 3 * PROBE_EVERY + 10


def test_a_handler_slow_on_the_threads_past_the_ceiling_is_never_probed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(invoker_module, "INLINE_NS", 10)  # 0.1 us a handler: 2 us ceiling
    handler = Recorder(on_threads_s=0.001)

    loop_thread, _ = serve(Workers([handler], 1, 100), 2 * PROBE_EVERY + 10)

    assert loop_thread not in handler.threads


@pytest.mark.usefixtures("generous")
def test_a_handler_running_a_loop_of_its_own_works_on_the_event_loop() -> None:
    """asyncio.run inside a handler: the server's loop is hidden from it during the call."""

    class OwnLoop(Recorder):
        def predict(self, requests: list[TsRequest], socket: FrameSocket) -> frames.Frame:
            async def twice(body: bytes) -> bytes:
                await asyncio.sleep(0)
                return body * 2

            self.threads.append(threading.get_ident())
            bodies = [asyncio.run(twice(r.parameters[0].value)) for r in requests]
            return frames.Frame(200, "", [_reply(body, {}) for body in bodies])

    handler = OwnLoop()

    loop_thread, bodies = serve(Workers([handler], 1, 100), PROBE_EVERY + 10)

    assert handler.threads[-1] == loop_thread
    assert bodies == [str(n).encode() * 2 for n in range(PROBE_EVERY + 10)]
