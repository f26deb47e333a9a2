"""grps over HTTP (``protocols/grps/jsonwire.py``): request bodies read as a GrpsMessage (JSON,
protobuf's JSON mapping, or ``ndarray``), then as the payload a model gets.

Properties: only the project's errors (4xx) escape reading a body; a message read writes back
(``jsonwire.encode``, the replies' writer) to JSON that reads back to the same message; a float
tensor holds an infinity only where the body spells one (no finite number narrowed to it).
"""

from __future__ import annotations

import numpy as np

from rosettaserve.protocols.grps import convert, jsonwire
from tests.fuzz.targets.refusals import assert_a_refusal


def check(data: bytes) -> None:
    try:
        message = jsonwire.parse_message(jsonwire.JSON, data, allow_empty=True)
    except Exception as exc:
        assert_a_refusal(exc)
    else:
        again = jsonwire.parse_message(jsonwire.JSON, jsonwire.encode(message))
        assert again == message, (message, again)
    try:
        payload = jsonwire.parse_predict("application/json; charset=utf-8", data)
    except Exception as exc:
        assert_a_refusal(exc)
        return
    assert isinstance(payload, convert.Payload)
    for tensor in payload.tensors:
        if tensor.data.dtype.kind == "f" and np.isinf(tensor.data).any():
            assert b"inf" in data.lower(), f"an infinity no one sent: {tensor.name}"
