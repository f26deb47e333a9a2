"""How many BYTES elements a request may make, and where they are made: the count checked against
the bytes present and against ``MAX_BYTES_ELEMENTS`` before anything is allocated; on the event
loop (``inline``) no more than ``INLINE_ELEMENTS`` made one by one, beyond which the parsers
raise LargeWork and their caller parses again on the request-work threads. Over REST (binary
and JSON), gRPC (raw contents, bytes_contents read off the wire or by protobuf) and answers."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import numpy as np
import pytest

from rosettaserve.core import codec
from rosettaserve.core.codec import (
    INLINE_ELEMENTS,
    MAX_BYTES_ELEMENTS,
    from_json,
    from_raw,
    raw_bytes,
    to_raw,
)
from rosettaserve.core.dtypes import DTYPES
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.executor import LargeWork
from rosettaserve.core.types import InferenceRequest, InferenceResponse, Tensor
from rosettaserve.protocols.oip import convert, grpc_convert, grpc_wire
from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb

BYTES = DTYPES["BYTES"]


def packed(items: list[bytes]) -> bytes:
    return b"".join(len(i).to_bytes(4, "little") + i for i in items)


def items(count: int) -> list[bytes]:
    return [b"x" * (i % 3) for i in range(count)]


@pytest.mark.parametrize("count", [2**23, 2**40, 2**62])
def test_a_count_the_body_cannot_hold_is_refused_before_allocating(count: int) -> None:
    """Each element needs 4 bytes of length: a body of 32 bytes holds at most 8."""
    tracemalloc.start()
    try:
        with pytest.raises(InvalidInput, match=f"declares {count} elements but only 32 bytes"):
            from_raw(b"\0" * 32, BYTES, (count,), "t", inline=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 16, f"allocated {peak} bytes before refusing"


def test_more_elements_than_the_limit_are_refused_before_any_is_made() -> None:
    count = MAX_BYTES_ELEMENTS + 1
    body = b"\0" * (4 * count)  # as many empty elements: the body could hold them
    tracemalloc.start()
    try:
        with pytest.raises(InvalidInput, match=f"{count} elements; at most {MAX_BYTES_ELEMENTS}"):
            from_raw(body, BYTES, (1, count), "t")
        with pytest.raises(InvalidInput, match="at most"):
            from_json([""] * 4, BYTES, (count,), "t")  # the shape's count, before the data's
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 16, f"allocated {peak} bytes before refusing"
    with pytest.raises(InvalidInput, match="at most"):  # nested: what the data holds
        from_json([[""] * (count // 2 + 1)] * 2, BYTES, (2, count // 2 + 1), "t")


def test_past_the_inline_budget_the_decoding_is_left_to_the_threads() -> None:
    many = items(INLINE_ELEMENTS + 1)
    with pytest.raises(LargeWork):
        from_raw(packed(many), BYTES, (len(many),), "t", inline=True)
    assert list(from_raw(packed(many), BYTES, (len(many),), "t")) == many
    within = items(INLINE_ELEMENTS)
    assert list(from_raw(packed(within), BYTES, (len(within),), "t", inline=True)) == within
    texts = [i.decode() for i in many]
    with pytest.raises(LargeWork):
        from_json(texts, BYTES, (len(texts),), "t", inline=True)
    assert list(from_json(texts, BYTES, (len(texts),), "t")) == many


def test_numbers_checked_one_by_one_are_left_to_the_threads_too() -> None:
    """A JSON list numpy cannot read as it is (a boolean among the numbers) is checked value
    by value: past the budget, on the threads; where it is refused is unchanged."""
    data: list[Any] = [1] * INLINE_ELEMENTS + [True]
    with pytest.raises(LargeWork):
        from_json(data, DTYPES["INT32"], (len(data),), "t", inline=True)
    with pytest.raises(InvalidInput, match="got boolean True"):
        from_json(data, DTYPES["INT32"], (len(data),), "t")
    plain = [1] * (INLINE_ELEMENTS * 2)  # read by numpy at once: no budget
    assert from_json(plain, DTYPES["INT32"], (len(plain),), "t", inline=True).sum() == len(plain)


def test_a_large_bytes_answer_is_encoded_off_the_loop() -> None:
    many = np.array(items(INLINE_ELEMENTS + 1), dtype=object)
    with pytest.raises(LargeWork):
        to_raw(many, BYTES, inline=True)
    assert raw_bytes(many, BYTES) == packed(list(many))
    numbers = np.zeros(INLINE_ELEMENTS * 4, dtype=np.float32)
    assert len(to_raw(numbers, DTYPES["FP32"], inline=True)) == numbers.nbytes


def rest_body(count: int) -> tuple[bytes, str]:
    blob = packed(items(count))
    head = {"inputs": [{"name": "s", "datatype": "BYTES", "shape": [count]}]}
    head["inputs"][0]["parameters"] = {"binary_data_size": len(blob)}
    header = json.dumps(head).encode()
    return header + blob, str(len(header))


def test_oip_rest_parses_a_large_bytes_tensor_again_off_the_loop() -> None:
    body, header = rest_body(INLINE_ELEMENTS + 1)
    with pytest.raises(LargeWork):
        convert.parse_infer(body, header, "m", "", True)
    request = convert.parse_infer(body, header, "m", "", False)
    assert list(request.inputs[0].data) == items(INLINE_ELEMENTS + 1)
    small, small_header = rest_body(3)
    assert list(convert.parse_infer(small, small_header, "m", "", True).inputs[0].data) == items(3)


def test_oip_rest_answers_a_large_bytes_output_off_the_loop() -> None:
    data = np.array(items(INLINE_ELEMENTS + 1), dtype=object)
    response = InferenceResponse("m", "1", [Tensor("o", "BYTES", data.shape, data)])
    request = InferenceRequest("m", [])
    with pytest.raises(LargeWork):
        convert.encode_infer(response, request, True)
    body, _, _ = convert.encode_infer(response, request)
    assert json.loads(body)["outputs"][0]["data"][:3] == ["", "x", "xx"]


def bytes_message(count: int) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="m")
    tensor = message.inputs.add(name="s", datatype="BYTES", shape=[count])
    tensor.contents.bytes_contents.extend(items(count))
    return message


def test_grpc_bytes_contents_past_the_budget_are_read_off_the_loop() -> None:
    data = bytes_message(INLINE_ELEMENTS + 1).SerializeToString()
    with pytest.raises(LargeWork):
        grpc_wire.request_from(data, True)
    request = grpc_wire.request_from(data)
    assert list(request.inputs[0].data) == items(INLINE_ELEMENTS + 1)


def test_grpc_packed_varints_past_the_budget_are_read_off_the_loop() -> None:
    message = pb.ModelInferRequest(model_name="m")
    count = INLINE_ELEMENTS + 1
    tensor = message.inputs.add(name="i", datatype="INT32", shape=[count])
    tensor.contents.int_contents.extend(range(count))
    data = message.SerializeToString()
    with pytest.raises(LargeWork):
        grpc_wire.request_from(data, True)
    assert grpc_wire.request_from(data).inputs[0].data.sum() == sum(range(count))


def test_grpc_raw_bytes_past_the_budget_and_its_answer_off_the_loop() -> None:
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="s", datatype="BYTES", shape=[INLINE_ELEMENTS + 1])
    message.raw_input_contents.append(packed(items(INLINE_ELEMENTS + 1)))
    data = message.SerializeToString()
    with pytest.raises(LargeWork):
        grpc_wire.request_from(data, True)
    request = grpc_wire.request_from(data)
    response = InferenceResponse(
        "m", "1", [Tensor("o", "BYTES", (INLINE_ELEMENTS + 1,), request.inputs[0].data)]
    )
    with pytest.raises(LargeWork):
        grpc_wire.reply_bytes(response, True)
    reply = pb.ModelInferResponse.FromString(grpc_wire.reply_bytes(response))
    assert reply.raw_output_contents[0] == message.raw_input_contents[0]


def test_grpc_bytes_contents_past_the_limit_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wire reader counts them as it reads; protobuf's parse before they are copied out."""
    monkeypatch.setattr(codec, "MAX_BYTES_ELEMENTS", INLINE_ELEMENTS + 10)
    message = bytes_message(INLINE_ELEMENTS + 11)
    with pytest.raises(InvalidInput, match=f"'s' has {INLINE_ELEMENTS + 11} elements"):
        grpc_wire.request_from(message.SerializeToString())
    with pytest.raises(InvalidInput, match=f"{INLINE_ELEMENTS + 11} elements; at most"):
        grpc_convert.parse_infer(message)
    fits = bytes_message(INLINE_ELEMENTS + 10)
    assert len(grpc_wire.request_from(fits.SerializeToString()).inputs[0].data) > INLINE_ELEMENTS
