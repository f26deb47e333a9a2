"""Numbers in header values that the network decodes as latin-1: "²" and "³" are digits to
str.isdigit() and not to int(). Each such value is a 400 (or the protocol's refusal), never an
exception (found by fuzzing the Inference-Header-Content-Length; the others are the same kind).
The gRPC timeout's case is a regression input of the h2_frames target."""

from __future__ import annotations

import pytest

from rosettaserve.core.errors import InvalidInput
from rosettaserve.pd.wire import parse_prefill_headers
from rosettaserve.protocols.oip.convert import json_length

SUPERSCRIPTS = ["\u00b2", "\u00b3", "8\u00b9", "\u00b9\u00b2\u00b3"]


@pytest.mark.parametrize("value", SUPERSCRIPTS)
def test_oip_header_length_of_superscripts_is_refused(value: str) -> None:
    with pytest.raises(InvalidInput, match="Inference-Header-Content-Length"):
        json_length(value, 100)


@pytest.mark.parametrize("value", SUPERSCRIPTS)
def test_pd_decode_port_of_superscripts_is_refused(value: str) -> None:
    headers = {"req-type": "prefill", "req-id": "ab12", "d-target": f"127.0.0.1;{value}"}
    with pytest.raises(InvalidInput, match="port"):
        parse_prefill_headers(headers)
    headers = {**headers, "d-target": "127.0.0.1", "d-port": value}
    with pytest.raises(InvalidInput, match="port"):
        parse_prefill_headers(headers)
