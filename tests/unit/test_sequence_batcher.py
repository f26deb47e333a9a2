"""The sequence batcher in-process, with a recording model: which rows a batch holds (direct:
a sequence's row is its slot, empty slots READY false; oldest: the oldest requests, packed),
the control tensors' values, the state carried, and sequence_batching's mistakes in model.yaml."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.model import Arrays
from rosettaserve.core.registry import SequenceBatching
from rosettaserve.repository.config import ConfigError, parse_config
from rosettaserve.scheduling.sequence import SequenceBatcher

CONTROLS = [
    {"name": "START", "control": [{"kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, 1]}]},
    {"name": "END", "control": [{"kind": "CONTROL_SEQUENCE_END", "int32_false_true": [0, 1]}]},
    {"name": "READY", "control": [{"kind": "CONTROL_SEQUENCE_READY", "int32_false_true": [0, 1]}]},
    {"name": "CORRID", "control": [{"kind": "CONTROL_SEQUENCE_CORRID", "data_type": "UINT64"}]},
]
STATE = [{"input_name": "STATE_IN", "output_name": "STATE_OUT", "data_type": "INT32", "dims": [1]}]


def settings(**batching: Any) -> SequenceBatching:
    doc = {"control_input": CONTROLS, "state": STATE, **batching}
    parsed = parse_config({"runtime": "python", "max_batch_size": 4, "sequence_batching": doc})
    assert parsed.sequence_batching is not None
    return parsed.sequence_batching


class Recorder:
    """Sums each row's INPUT into its state; keeps every batch it was given. ``gate``: each
    call waits for it (so the test decides what queues up meanwhile)."""

    streams = False
    takes_parameters = False

    def __init__(self) -> None:
        self.batches: list[Arrays] = []
        self.gate: asyncio.Event | None = None

    async def predict(self, inputs: Arrays, parameters: dict[str, Any], call: Any = None) -> Any:
        self.batches.append(inputs)
        if self.gate is not None:
            await self.gate.wait()
        total = np.where(
            inputs["START"] == 1, inputs["INPUT"], inputs["STATE_IN"] + inputs["INPUT"]
        )
        return {"OUTPUT": total, "STATE_OUT": total}


def batcher(model: Recorder, **batching: Any) -> SequenceBatcher:
    return SequenceBatcher(
        model,  # type: ignore[arg-type]  # (an Invoker's interface)
        "m",
        4,
        settings(**batching),
        lanes=1,
        hidden=frozenset({"STATE_OUT"}),
    )


def request(value: int) -> Arrays:
    return {"INPUT": np.array([[value]], np.int32)}


async def ask(b: SequenceBatcher, value: int, sid: int, **flags: bool) -> int:
    params = {"sequence_id": sid, **{f"sequence_{k}": v for k, v in flags.items()}}
    result = await b.predict(request(value), params)
    assert set(result) == {"OUTPUT"}  # the state output stays the server's
    return int(result["OUTPUT"][0, 0])


def column(batch: Arrays, name: str) -> list[int]:
    return [int(v) for v in batch[name].reshape(-1)]


async def held(
    model: Recorder, b: SequenceBatcher, calls: list[tuple[int, int, bool]]
) -> list[int]:
    """Hold the model on a first call, queue ``calls`` (value, id, start) behind it, let go."""
    model.gate = asyncio.Event()
    first = asyncio.ensure_future(ask(b, 0, 99, start=True))
    await asyncio.sleep(0)
    tasks = [asyncio.ensure_future(ask(b, v, sid, start=s)) for v, sid, s in calls]
    await asyncio.sleep(0.01)
    model.gate.set()
    await first
    return list(await asyncio.gather(*tasks))


def test_direct_rows_are_the_slots_and_empty_slots_are_not_ready() -> None:
    async def run() -> None:
        model = Recorder()
        b = batcher(model, direct={})
        assert await ask(b, 1, 7, start=True) == 1  # slot 0
        assert await ask(b, 5, 8, start=True) == 5  # slot 1
        assert await ask(b, 9, 9, start=True) == 9  # slot 2
        assert await ask(b, 2, 9, end=True) == 11  # slot 2 alone: rows 0 and 1 empty
        batch = model.batches[-1]
        assert column(batch, "READY") == [0, 0, 1]
        assert column(batch, "END") == [0, 0, 1]
        assert column(batch, "CORRID") == [0, 0, 9]
        assert column(batch, "INPUT") == [0, 0, 2]
        assert column(batch, "STATE_IN") == [0, 0, 9]
        assert await ask(b, 3, 7) == 4  # its state survived the others

    asyncio.run(run())


def test_direct_batches_the_sequences_waiting_together() -> None:
    async def run() -> None:
        model = Recorder()
        b = batcher(model, direct={})
        sums = await held(model, b, [(1, 1, True), (2, 2, True), (3, 1, False)])
        assert sums == [1, 2, 4]
        # slot 0 is 99's; 1 and 2 ran together, then 1's second request alone
        assert [column(x, "CORRID") for x in model.batches[1:]] == [[0, 1, 2], [0, 1]]
        assert column(model.batches[1], "READY") == [0, 1, 1]

    asyncio.run(run())


def test_requests_of_other_shapes_wait_for_a_batch_of_their_own() -> None:
    async def run() -> None:
        model = Recorder()
        b = batcher(model, direct={})
        model.gate = asyncio.Event()
        first = asyncio.ensure_future(ask(b, 0, 99, start=True))
        await asyncio.sleep(0)
        params = [{"sequence_id": sid, "sequence_start": True} for sid in (1, 2, 3)]
        widths = [1, 3, 1]
        tasks = [
            asyncio.ensure_future(b.predict({"INPUT": np.ones((1, w), np.int32)}, p))
            for w, p in zip(widths, params, strict=True)
        ]
        await asyncio.sleep(0.01)
        model.gate.set()
        await first
        shapes = [r["OUTPUT"].shape for r in await asyncio.gather(*tasks)]
        assert shapes == [(1, 1), (1, 3), (1, 1)]
        assert [column(x, "READY") for x in model.batches[1:]] == [[0, 1, 0, 1], [0, 0, 1]]

    asyncio.run(run())


def test_oldest_packs_the_oldest_requests() -> None:
    async def run() -> None:
        model = Recorder()
        oldest = {
            "max_candidate_sequences": 8,
            "preferred_batch_size": [2],
            "max_queue_delay_microseconds": 100_000,  # then the third one runs alone
        }
        b = batcher(model, oldest=oldest)
        sums = await asyncio.gather(*(ask(b, sid, sid, start=True) for sid in (1, 2, 3)))
        assert sums == [1, 2, 3]
        corrids = [column(x, "CORRID") for x in model.batches]
        assert corrids == [[1, 2], [3]]  # the preferred size ran at once, then the rest
        assert column(model.batches[0], "READY") == [1, 1]

    asyncio.run(run())


def test_a_start_needs_an_id_and_others_a_start() -> None:
    async def run() -> None:
        b = batcher(Recorder(), direct={})
        with pytest.raises(InvalidInput, match="non-zero or non-empty correlation ID"):
            await ask(b, 1, 0, start=True)
        with pytest.raises(InvalidInput, match="sequence 5 to model 'm' must specify the START"):
            await ask(b, 1, 5)
        with pytest.raises(InvalidInput, match="must specify batch-size 1"):
            await b.predict({"INPUT": np.ones((2, 1), np.int32)}, {"sequence_id": 1})

    asyncio.run(run())


def test_oldest_prefers_a_full_batch_unless_told() -> None:
    """Triton's default, which its configuration shows: the same batches as none preferred."""
    for given, preferred in (({}, (4,)), ({"preferred_batch_size": [3, 2, 3]}, (2, 3))):
        config = parse_config(
            {"runtime": "python", "max_batch_size": 4, "sequence_batching": {"oldest": given}}
        )
        assert config.sequence_batching is not None
        assert config.sequence_batching.preferred_batch_size == preferred


@pytest.mark.parametrize(
    ("batching", "message"),
    [
        ({"direct": {}, "oldest": {}}, "give one strategy"),
        (
            {"control_input": [{"name": "S", "control": [{"kind": "CONTROL_SEQUENCE_START"}]}]},
            "needs int32_false_true",
        ),
        (
            {"control_input": [{"name": "C", "control": [{"kind": "CONTROL_SEQUENCE_CORRID"}]}]},
            "CONTROL_SEQUENCE_CORRID needs data_type",
        ),
        ({"oldest": {"preferred_batch_size": [9]}}, r"from 1 to max_batch_size \(4\)"),
        ({"stategy": {}}, "unknown key sequence_batching.stategy"),
    ],
)
def test_mistakes_are_named(batching: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({"runtime": "python", "max_batch_size": 4, "sequence_batching": batching})


def test_one_scheduler_only() -> None:
    with pytest.raises(ConfigError, match="give one scheduler"):
        parse_config(
            {
                "runtime": "python",
                "max_batch_size": 4,
                "dynamic_batching": {},
                "sequence_batching": {},
            }
        )
