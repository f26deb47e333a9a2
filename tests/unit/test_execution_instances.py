"""A model version's execution instances: model.yaml ``instances`` and ``isolation``, the threads
that run its calls, the check that turns a version whose every instance is stuck not ready, and
the control channel that carries tensors to ``isolation: process`` workers."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from time import perf_counter_ns
from typing import Any

import numpy as np
import pytest

from rosettaserve.core.call import Call
from rosettaserve.core.executor import ThreadInstances
from rosettaserve.core.registry import ModelVersion, VersionState
from rosettaserve.repository import manager
from rosettaserve.repository.config import ConfigError, parse_config
from rosettaserve.repository.watchdog import check
from rosettaserve.scheduling.channel import (
    Channel,
    frames,
    receive_async,
    receive_blocking,
    send_async,
    send_blocking,
)

WAIT_S = 10.0  # an upper bound for anything a thread is waited for


def test_instances_and_isolation_default_to_the_runtime_and_threads() -> None:
    config = parse_config({"runtime": "python"})
    assert config.instances is None
    assert config.isolation == "thread"
    assert manager._instances(config) == 1
    cores = os.cpu_count() or 1
    assert manager._instances(parse_config({"runtime": "onnx"})) == cores
    assert manager._instances(parse_config({"runtime": "sklearn"})) == cores
    assert manager._instances(parse_config({"runtime": "onnx", "instances": 3})) == 3


def test_declared_instances_and_process_isolation_parse() -> None:
    config = parse_config({"runtime": "python", "instances": 4, "isolation": "process"})
    assert config.instances == 4
    assert config.isolation == "process"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"instances": 0}, "instances: expected an integer >= 1, got 0"),
        ({"instances": -2}, "instances: expected an integer >= 1, got -2"),
        ({"instances": "2"}, "instances: expected an integer >= 1, got '2' (text)"),
        ({"instances": 1.5}, "instances: expected an integer >= 1, got 1.5"),
        ({"instances": True}, "instances: expected an integer >= 1, got True"),
        ({"isolation": "fork"}, "isolation: 'fork' is not one of thread, process"),
        ({"isolation": True}, "isolation: expected one of thread, process"),
        (
            {"runtime": "onnx", "isolation": "process"},
            "for python and torchserve models only",
        ),
    ],
)
def test_bad_instances_or_isolation_say_what_is_wrong(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"runtime": "python", **raw})
    assert message in str(info.value)


class Held:
    """A blocking call that returns when released."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.release = threading.Event()

    def __call__(self, inputs: Any) -> str:
        self.inside.set()
        self.release.wait(WAIT_S)
        return "done"


def test_a_call_past_its_deadline_is_overdue_until_it_returns() -> None:
    async def main() -> None:
        instances = ThreadInstances("held", 2)
        held = Held()
        loop = asyncio.get_running_loop()
        call = Call(perf_counter_ns(), deadline=loop.time() + 0.05)
        running = instances.predict(call, held, None, {})
        await asyncio.to_thread(held.inside.wait, WAIT_S)
        assert instances.overdue(loop.time() - 1) == []  # before its deadline
        assert instances.overdue(loop.time() + 1) == [call]
        no_deadline = Call(perf_counter_ns())
        other = Held()
        also = instances.predict(no_deadline, other, None, {})
        await asyncio.to_thread(other.inside.wait, WAIT_S)
        assert instances.overdue(loop.time() + 1) == [call]  # a call without one never is
        held.release.set()
        other.release.set()
        assert await asyncio.wait_for(asyncio.gather(running, also), WAIT_S) == ["done", "done"]
        assert instances.overdue(loop.time() + 1) == []
        assert call.done >= call.ran > 0
        instances.close()

    asyncio.run(main())


def test_instances_run_no_more_calls_at_once_than_their_count() -> None:
    async def main() -> None:
        instances = ThreadInstances("one", 1)
        first, second = Held(), Held()
        a = instances.run(first, None)
        b = instances.run(second, None)
        await asyncio.to_thread(first.inside.wait, WAIT_S)
        assert not second.inside.is_set()  # queued behind the first: one instance
        first.release.set()
        await asyncio.to_thread(second.inside.wait, WAIT_S)
        second.release.set()
        assert await asyncio.wait_for(asyncio.gather(a, b), WAIT_S) == ["done", "done"]

    asyncio.run(main())


class FakePool:
    def __init__(self, count: int, overdue: list[Call]) -> None:
        self.count = count
        self.calls = overdue

    def overdue(self, now: float) -> list[Call]:
        return self.calls

    def close(self) -> None:
        pass


def stuck_call() -> Call:
    call = Call(perf_counter_ns(), deadline=0.0)
    call.ran = perf_counter_ns()
    return call


def test_a_version_is_not_ready_while_every_instance_is_stuck() -> None:
    mv = ModelVersion("m", "1", "python", state=VersionState.READY)
    pool = FakePool(2, [stuck_call()])
    mv.instances = pool
    check(mv, 1.0)
    assert mv.ready  # one of two instances is still free
    pool.calls = [stuck_call(), stuck_call()]
    check(mv, 1.0)
    assert mv.state is VersionState.UNAVAILABLE
    assert "all 2 execution instances" in mv.reason
    pool.calls = [pool.calls[0]]  # one returned
    check(mv, 1.0)
    assert mv.ready
    assert mv.reason == ""


def test_a_version_unready_for_another_reason_is_left_alone() -> None:
    mv = ModelVersion("m", "1", "python", state=VersionState.UNLOADING)
    mv.instances = FakePool(1, [stuck_call()])
    check(mv, 1.0)
    assert mv.state is VersionState.UNLOADING
    mv.instances = FakePool(1, [])
    failed = ModelVersion("m", "1", "python", state=VersionState.UNAVAILABLE, reason="bad")
    failed.instances = FakePool(1, [])
    check(failed, 1.0)
    assert failed.state is VersionState.UNAVAILABLE
    assert failed.reason == "bad"


def test_arrays_travel_out_of_band_and_arrive_writable() -> None:
    big = np.arange(1 << 18, dtype=np.float32).reshape(512, 512)
    parts = frames("predict", {"x": big, "s": np.array([b"a", b"bc"], dtype=object)}, {"k": 1})
    assert len(parts) == 2  # head + pickle, then the float array's data as it is
    assert parts[1].nbytes == big.nbytes
    mine, theirs = socket.socketpair()
    with mine, theirs:
        sender = threading.Thread(
            target=send_blocking, args=(mine, "predict", {"x": big}, {"k": 1})
        )
        sender.start()
        kind, inputs, parameters = receive_blocking(theirs)
        sender.join(WAIT_S)
    assert kind == "predict"
    assert parameters == {"k": 1}
    np.testing.assert_array_equal(inputs["x"], big)
    inputs["x"][0, 0] = -1.0  # a model may write to its inputs
    assert inputs["x"][0, 0] == -1.0


def test_the_async_channel_reads_what_the_blocking_side_sends() -> None:
    async def main() -> tuple[Any, ...] | None:
        mine, theirs = socket.socketpair()
        channel = await Channel.open(mine)
        payload = {"y": np.ones((3, 4), dtype=np.int64)}
        await asyncio.to_thread(send_blocking, theirs, "ok", payload)
        reply = await channel.receive()
        theirs.close()
        assert await channel.receive() is None  # the other end has gone
        channel.close()
        return reply

    reply = asyncio.run(main())
    assert reply is not None
    assert reply[0] == "ok"
    np.testing.assert_array_equal(reply[1]["y"], np.ones((3, 4), dtype=np.int64))


def test_a_worker_link_carries_arrays_both_ways_and_sees_the_end() -> None:
    async def main() -> tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]:
        mine, theirs = socket.socketpair()
        mine.setblocking(False)
        await send_async(mine, "predict", {"x": np.arange(6.0).reshape(2, 3)}, {})
        received = await asyncio.to_thread(receive_blocking, theirs)
        await asyncio.to_thread(send_blocking, theirs, "ok", {"y": received[1]["x"] * 2})
        reply = await receive_async(mine)
        theirs.close()
        end = await receive_async(mine)
        mine.close()
        return reply, end

    reply, end = asyncio.run(main())
    assert reply is not None
    np.testing.assert_array_equal(reply[1]["y"], np.arange(6.0).reshape(2, 3) * 2)
    assert end is None
