"""The gRPC ModelInfer message reader (``protocols/oip/grpc_wire.py``) fed arbitrary bytes.

Properties: only the project's errors (4xx) escape ``read_infer`` and ``request_from`` (the
reader, with protobuf behind it); where the reader reads a request itself, it means what
protobuf's own parse of ModelInferRequest means (``grpc_convert.parse_infer``), or is refused
alike; otherwise it hands the bytes to protobuf. Read on the event loop (``inline``), a request
means the same, or is left to the threads (LargeWork). ``model_named`` (the access line's skim
of the same bytes) never raises and gives two strings.
"""

from __future__ import annotations

from typing import Any

from rosettaserve.core.executor import LargeWork
from rosettaserve.protocols.oip import grpc_wire
from tests.fuzz.targets.refusals import assert_a_refusal
from tests.unit.test_oip_grpc_wire import by_protobuf, by_wire, meaning


def check(data: bytes) -> None:
    name, version = grpc_wire.model_named(data)
    assert isinstance(name, str), name
    assert isinstance(version, str), version
    whole = read(data, inline=False)
    inline = read(data, inline=True)
    assert inline == whole or inline[0] == "larger than the budget", (inline, whole)
    wire = by_wire(data)
    if wire[0] != "protobuf's":
        assert wire == by_protobuf(data), (wire, by_protobuf(data))


def read(data: bytes, *, inline: bool) -> tuple[str, Any]:
    try:
        request = grpc_wire.request_from(data, inline)
    except LargeWork:
        assert inline, "LargeWork off the event loop"
        return "larger than the budget", None
    except Exception as exc:
        assert_a_refusal(exc)
        return "refused", str(exc)
    return "request", meaning(request)
