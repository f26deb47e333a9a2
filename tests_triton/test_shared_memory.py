"""System shared memory on both servers, over REST and gRPC, with ``tritonclient.utils.
shared_memory``: register, status and unregister; an input read from a region at an offset and an
output written into one (numbers and strings); the errors of an unknown region and of sizes that
do not fit."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import serialize_byte_tensor

from tests_triton.clients import PROTOCOLS, client, refused, status_of
from tests_triton.servers import Peer

SIZE = 64  # bytes of each region
X = np.array([0.5, -1.0, 3.0], np.float32)  # 12 bytes
AT = 16  # where X lies in its region (what is before it is not X)


class Regions:
    """The regions one test makes (keys of its own), unregistered and destroyed after it."""

    def __init__(self, server: Peer, protocol: str) -> None:
        self.server, self.protocol = server, protocol
        self.made: list[Any] = []

    def key(self, name: str) -> str:
        return f"/tritonparity-{os.getpid()}-{self.server.name}-{self.protocol}-{name}"

    def make(self, name: str, size: int = SIZE) -> tuple[Any, str]:
        key = self.key(name)
        handle = shm.create_shared_memory_region(name, key, size)
        self.made.append(handle)
        return handle, key

    def close(self) -> None:
        with client(self.server, self.protocol) as c:
            c.unregister_system_shared_memory()
        for handle in self.made:
            shm.destroy_shared_memory_region(handle)


@pytest.fixture(params=PROTOCOLS)
def regions(server: Peer, request: pytest.FixtureRequest) -> Iterator[Regions]:
    made = Regions(server, request.param)
    yield made
    made.close()


def module(protocol: str) -> Any:
    return httpclient if protocol == "http" else grpcclient


def shared_input(protocol: str, name: str, region: str, size: int, offset: int = 0) -> Any:
    given = module(protocol).InferInput(name, [size // 4], "FP32")
    given.set_shared_memory(region, size, offset=offset)
    return given


def shared_output(protocol: str, name: str, region: str, size: int, offset: int = 0) -> Any:
    asked = module(protocol).InferRequestedOutput(name)
    asked.set_shared_memory(region, size, offset=offset)
    return asked


def register(regions: Regions) -> tuple[Any, Any]:
    """Region "in" holding X at AT (ones before it), region "out" for the answer."""
    ins, in_key = regions.make("in")
    shm.set_shared_memory_region(ins, [np.ones(AT // 4, np.float32), X])
    outs, out_key = regions.make("out")
    with client(regions.server, regions.protocol) as c:
        c.register_system_shared_memory("in", in_key, SIZE)
        c.register_system_shared_memory("out", out_key, SIZE)
    return ins, outs


def test_an_input_at_an_offset_and_an_output_into_a_region(regions: Regions) -> None:
    _, outs = register(regions)
    p = regions.protocol
    with client(regions.server, p) as c:
        result = c.infer(
            "double",
            [shared_input(p, "IN", "in", X.nbytes, offset=AT)],
            outputs=[shared_output(p, "OUT", "out", X.nbytes, offset=8)],
        )
    if p == "http":  # the answer is in the region, not in the reply
        assert "data" not in result.get_output("OUT")
        assert "binary_data_size" not in result.get_output("OUT").get("parameters", {})
    else:
        assert not any(result.get_response().raw_output_contents)
    answer = shm.get_contents_as_numpy(outs, np.float32, [3], offset=8)
    assert answer.tolist() == (X * 2).tolist()


def test_strings_through_a_region(regions: Regions) -> None:
    text = np.array([b"hello", b"Triton"], dtype=object)
    serialized = serialize_byte_tensor(text)
    size = len(serialized.item())
    handle, key = regions.make("text", 128)
    shm.set_shared_memory_region(handle, [serialized])
    p = regions.protocol
    given = module(p).InferInput("TEXT", [2], "BYTES")
    given.set_shared_memory("text", size)
    with client(regions.server, p) as c:
        c.register_system_shared_memory("text", key, 128)
        c.infer("upper", [given], outputs=[shared_output(p, "UPPER", "text", 64, offset=64)])
    got = shm.get_contents_as_numpy(handle, np.object_, [2], offset=64)
    assert got.tolist() == [b"HELLO", b"TRITON"]


def test_status_and_unregister(regions: Regions) -> None:
    register(regions)
    with client(regions.server, regions.protocol) as c:
        assert status(c, regions.protocol) == {
            name: {"name": name, "key": regions.key(name), "offset": 0, "byte_size": SIZE}
            for name in ("in", "out")
        }
        assert list(status(c, regions.protocol, "in")) == ["in"]
        c.unregister_system_shared_memory("in")
        c.unregister_system_shared_memory("never-registered")  # no error
        assert list(status(c, regions.protocol)) == ["out"]
        c.unregister_system_shared_memory()
        assert status(c, regions.protocol) == {}


def status(c: Any, protocol: str, name: str = "") -> dict[str, dict[str, Any]]:
    """The registered regions by name, each as REST shows it (gRPC's numbers made ints)."""
    if protocol == "http":
        return {r["name"]: r for r in c.get_system_shared_memory_status(name)}
    regions = c.get_system_shared_memory_status(name, as_json=True).get("regions", {})
    return {
        n: {"name": n, "key": r["key"], "offset": int(r.get("offset", 0)),
            "byte_size": int(r["byte_size"])}
        for n, r in regions.items()
    }  # fmt: skip


def test_errors_of_regions_and_sizes(regions: Regions) -> None:
    """The same messages from both. Documented differences in the status: an output region
    smaller than the output is a client's mistake on ours (400), INTERNAL (500) on Triton."""
    register(regions)
    p, triton = regions.protocol, regions.server.name == "triton"
    with client(regions.server, p) as c:

        def infer(given: Any, asked: Any = None) -> Any:
            return lambda: c.infer("double", [given], outputs=asked)

        unknown = refused(infer(shared_input(p, "IN", "nope", X.nbytes)))
        assert unknown.status() == status_of(p, 404)
        assert unknown.message() == "Unable to find shared memory region: 'nope'"
        past = refused(infer(shared_input(p, "IN", "in", X.nbytes, offset=SIZE - 4)))
        assert past.status() == status_of(p, 400)
        assert past.message() == "Invalid offset + byte size for shared memory region: 'in'"
        at_end = refused(infer(shared_input(p, "IN", "in", X.nbytes, offset=SIZE)))
        assert at_end.status() == status_of(p, 400)
        assert at_end.message() == "Invalid offset for shared memory region: 'in'"
        small = [shared_output(p, "OUT", "out", X.nbytes - 4)]
        too_small = refused(infer(shared_input(p, "IN", "in", X.nbytes, offset=AT), small))
        assert too_small.status() == status_of(p, 500 if triton else 400)
        assert too_small.message() == (
            "shared memory size specified with the request for output 'OUT' (8 bytes) should "
            "be at least 12 bytes to hold the results"
        )


def test_errors_of_registering(regions: Regions) -> None:
    """Documented differences: a name already registered is 409 over REST on ours, 400 on
    Triton (ALREADY_EXISTS over gRPC on both); a size past the object's end and a key no object
    has are a client's mistake on ours (400 / INVALID_ARGUMENT), INTERNAL on Triton, whose
    message for the first names the key ("Invalid shared memory region"), ours the region
    ("invalid args")."""
    _, key = regions.make("small", 16)
    p, triton = regions.protocol, regions.server.name == "triton"
    with client(regions.server, p) as c:
        c.register_system_shared_memory("small", key, 16)
        again = refused(lambda: c.register_system_shared_memory("small", key, 16))
        assert again.status() == status_of(p, 400 if triton and p == "http" else 409)
        assert again.message() == "shared memory region 'small' already in manager"
        too_big = refused(lambda: c.register_system_shared_memory("big", key, 17))
        assert too_big.status() == status_of(p, 500 if triton else 400)
        assert too_big.message() == (
            f"Invalid shared memory region: '{key}'"
            if triton
            else "failed to register shared memory region 'big': invalid args"
        )
        missing = refused(lambda: c.register_system_shared_memory("x", f"{key}-none", 8))
        assert missing.status() == status_of(p, 500 if triton else 400)
        assert missing.message() == f"Unable to open shared memory region: '{key}-none'"
        assert list(status(c, p)) == ["small"]


def test_an_unknown_regions_status(server: Peer) -> None:
    with client(server, "http") as c:
        caught = refused(lambda: c.get_system_shared_memory_status("nothing"))
    assert "Unable to find system shared memory region: 'nothing'" in caught.message()
    assert caught.status() == "404"
