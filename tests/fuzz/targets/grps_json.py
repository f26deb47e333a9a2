"""grps over HTTP (``protocols/grps/jsonwire.py``): request bodies read as a GrpsMessage (JSON,
protobuf's JSON mapping, or ``ndarray``), then as the payload a model gets.

Properties: only the project's errors (4xx) escape reading a body; a message read writes back
(``jsonwire.encode``, the replies' writer) to JSON that reads back to the same message.
"""

from __future__ import annotations

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
