"""The shared-memory registry on real /dev/shm objects: what a request may name, what survives
an unregister during a request, and the parameters a tensor places itself with."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rosettaserve.core.errors import InvalidInput, NotFound, Unsupported
from rosettaserve.core.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from rosettaserve.protocols.oip import shared_memory as sm

SIZE = 2 * mmap.ALLOCATIONGRANULARITY


@pytest.fixture
def key(request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"rs_unit_{os.getpid()}_{request.node.name}"[:100]
    path = Path("/dev/shm") / name
    path.write_bytes(bytes(range(256)) * (SIZE // 256))
    yield "/" + name
    path.unlink(missing_ok=True)


@pytest.fixture
def regions() -> Iterator[sm.Regions]:
    """The process's registry, open (a server built earlier in this process may have closed
    it: --allow-client-shm off), as it was afterwards."""
    previous, sm.REGIONS.refusal = sm.REGIONS.refusal, None
    yield sm.REGIONS
    sm.REGIONS.refusal = None
    sm.REGIONS.unregister()
    sm.REGIONS.refusal = previous


def test_an_unaligned_offset_maps_the_right_bytes(regions: sm.Regions, key: str) -> None:
    regions.register("r", key, 1000, 100)  # not a multiple of the page size
    assert bytes(regions.get("r").read(0, 4)) == bytes(range(1000 % 256, 1000 % 256 + 4))


def test_a_request_keeps_its_view_through_unregister(regions: sm.Regions, key: str) -> None:
    regions.register("r", key, 0, SIZE)
    region = regions.get("r")
    view = region.read(16, 8)
    array = np.frombuffer(view, np.uint8)
    regions.unregister("r")
    with pytest.raises(NotFound):
        regions.get("r")
    assert list(array) == list(range(16, 24))  # still mapped for the request that holds it
    region.write(0, b"\xff")  # an output after the unregister: the descriptor is still open
    assert Path("/dev/shm", key.lstrip("/")).read_bytes()[0] == 0xFF
    regions.register("r", key, 0, 8)  # the name is free again at once


def test_input_views_are_read_only(regions: sm.Regions, key: str) -> None:
    regions.register("r", key, 0, 64)
    params = {sm.REGION: "r", sm.BYTE_SIZE: 16, sm.OFFSET: 8}
    view = sm.input_bytes(params, "IN")
    assert view is not None
    assert view.readonly
    assert bytes(view) == bytes(range(8, 24))


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({sm.BYTE_SIZE: 4}, "can not be specified without 'shared_memory_region'"),
        ({sm.OFFSET: 4}, "can not be specified without 'shared_memory_region'"),
        ({sm.REGION: 7, sm.BYTE_SIZE: 4}, "expected a string"),
        ({sm.REGION: "r"}, "must be specified along with"),
        ({sm.REGION: "r", sm.BYTE_SIZE: -1}, "non-negative integer"),
        ({sm.REGION: "r", sm.BYTE_SIZE: 4, sm.OFFSET: True}, "non-negative integer"),
        ({sm.REGION: "r", sm.BYTE_SIZE: 4, sm.OFFSET: 64}, "Invalid offset for"),
        ({sm.REGION: "r", sm.BYTE_SIZE: 2**64, sm.OFFSET: 1}, "Invalid offset + byte size"),
    ],
)
def test_parameters_that_do_not_place_a_tensor(
    regions: sm.Regions, key: str, params: dict[str, object], fragment: str
) -> None:
    regions.register("r", key, 0, 64)
    with pytest.raises(InvalidInput) as info:
        sm.input_bytes(params, "IN")
    assert fragment in info.value.message


def test_outputs_written_and_answered_without_data(regions: sm.Regions, key: str) -> None:
    regions.register("r", key, 0, 64)
    placed = {sm.REGION: "r", sm.BYTE_SIZE: 16, sm.OFFSET: 32}
    request = InferenceRequest("m", [], outputs=[RequestedOutput("OUT", placed)])
    sm.note_outputs(request)
    data = np.arange(4, dtype=np.int32)
    response = InferenceResponse("m", "1", [Tensor("OUT", "INT32", (4,), data)])
    sm.place_outputs(request, response)
    out = response.outputs[0]
    assert (out.name, out.datatype, out.shape, out.data.size) == ("OUT", "INT32", (4,), 0)
    written = Path("/dev/shm", key.lstrip("/")).read_bytes()[32:48]
    assert np.frombuffer(written, np.int32).tolist() == [0, 1, 2, 3]


def test_an_output_with_binary_data_or_classification_is_refused(
    regions: sm.Regions, key: str
) -> None:
    regions.register("r", key, 0, 64)
    for extra in ({"binary_data": True}, {"classification": 2}):
        params = {sm.REGION: "r", sm.BYTE_SIZE: 16, **extra}
        with pytest.raises(InvalidInput, match="can't set both"):
            sm.output_placements([RequestedOutput("OUT", params)])


def test_registration_is_bounded(regions: sm.Regions, key: str) -> None:
    with pytest.raises(InvalidInput, match="invalid args"):
        regions.register("r", key, 0, 0)
    with pytest.raises(InvalidInput, match="invalid args"):
        regions.register("r", key, SIZE, 1)
    for bad in ("", "/", "/..", "/a/b", "/x\0y"):
        with pytest.raises(InvalidInput, match="invalid shm key"):
            regions.register("r", bad, 0, 1)
    os.mkfifo(Path("/dev/shm") / f"rs_unit_fifo_{os.getpid()}")
    try:
        with pytest.raises(InvalidInput, match="Unable to open"):  # no regular file
            regions.register("r", f"/rs_unit_fifo_{os.getpid()}", 0, 1)
    finally:
        os.unlink(Path("/dev/shm") / f"rs_unit_fifo_{os.getpid()}")
    assert regions.status() == []


def test_refused_under_several_workers(regions: sm.Regions, key: str) -> None:
    regions.refusal = sm.WORKERS_REFUSAL
    with pytest.raises(Unsupported, match="--workers 1"):
        regions.register("r", key, 0, 8)


def test_refusal_off_by_default_then_under_workers() -> None:
    assert sm.refusal(False, False) == sm.DISABLED_REFUSAL
    assert sm.refusal(False, True) == sm.DISABLED_REFUSAL
    assert sm.refusal(True, True) == sm.WORKERS_REFUSAL
    assert sm.refusal(True, False) is None
