"""ModelInfer's messages read and written without protobuf give what protobuf gives.

Every reference here is protobuf itself: a request is compared with ``parse_infer`` of the
message protobuf parses from the same bytes, a reply with ``encode_infer``'s message. Requests
are generated (fixed seed) over every field of the message, written by protobuf and by hand
in the forms protobuf writes less often (unpacked numbers, a field twice, a packed field in
pieces); then mutated byte by byte, where the reader must either agree with protobuf or hand
the bytes to it.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pytest
from google.protobuf.internal import encoder
from google.protobuf.message import DecodeError

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.types import InferenceRequest, InferenceResponse, Tensor
from rosettaserve.protocols.oip import grpc_wire
from rosettaserve.protocols.oip.grpc_convert import CONTENTS_FIELD, encode_infer, parse_infer
from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb

SEED = 20261122
TEXTS = ["", "m", "identity", "modèle-ü", "名前", "x" * 200]


# -- what a request means, as plain data -------------------------------------------------------


def plain(value: Any) -> Any:
    """A value with floats as their repr (NaN equals NaN) and arrays as dtype, shape, bytes."""
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return ("objects", value.shape, [bytes(v) for v in value.ravel()])
        return (value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return (type(value).__name__, value)


def meaning(request: InferenceRequest) -> Any:
    return plain(
        {
            "model": [request.model_name, request.model_version, request.id],
            "parameters": request.parameters,
            "context": request.context,
            "inputs": [[t.name, t.datatype, t.shape, t.data, t.parameters] for t in request.inputs],
            "outputs": [[o.name, o.parameters] for o in request.outputs or []],
        }
    )


def by_protobuf(data: bytes) -> tuple[str, Any]:
    try:
        message = pb.ModelInferRequest.FromString(data)
    except DecodeError:
        return "undecodable", None
    try:
        return "request", meaning(parse_infer(message))
    except InvalidInput as exc:
        return "refused", exc.message


def by_wire(data: bytes) -> tuple[str, Any]:
    try:
        request = grpc_wire.read_infer(data)
    except InvalidInput as exc:
        return "refused", exc.message
    return ("request", meaning(request)) if request is not None else ("protobuf's", None)


# -- generated requests ------------------------------------------------------------------------


def pick(rng: np.random.Generator, choices: list[Any]) -> Any:
    """One of ``choices`` as it is (rng.choice would turn big ints into floats)."""
    return choices[int(rng.integers(len(choices)))]


def set_random_parameter(target: Any, rng: np.random.Generator) -> None:
    kind = int(rng.integers(5))
    if kind == 0:
        target.bool_param = bool(rng.integers(2))
    elif kind == 1:
        target.int64_param = int(pick(rng, [0, -1, 7, -(2**63), 2**63 - 1, -300]))
    elif kind == 2:
        target.string_param = str(pick(rng, TEXTS))
    elif kind == 3:
        target.double_param = float(pick(rng, [0.0, -2.5, 1e300, math.inf, math.nan, 1 / 3]))
    else:
        target.uint64_param = int(pick(rng, [0, 1, 2**63, 2**64 - 1]))


def random_parameters(target: Any, rng: np.random.Generator) -> None:
    for i in range(int(pick(rng, [0, 0, 1, 3]))):
        set_random_parameter(target[f"p{i}"], rng)


def typed_values(field: str, count: int, rng: np.random.Generator) -> list[Any]:
    if field == "bool_contents":
        return [bool(v) for v in rng.integers(0, 2, count)]
    if field == "bytes_contents":
        return [
            bytes(rng.integers(0, 256, int(rng.integers(0, 6))).astype(np.uint8))
            for _ in range(count)
        ]
    if field in ("fp32_contents", "fp64_contents"):
        return [float(v) for v in rng.standard_normal(count) * 1e3]
    low, high = {
        "int_contents": (-(2**31), 2**31),
        "int64_contents": (-(2**63), 2**63),
        "uint_contents": (0, 2**32),
        "uint64_contents": (0, 2**64),
    }[field]
    return [
        int(v) for v in rng.integers(low, high, count, dtype=np.uint64 if low == 0 else np.int64)
    ]


def random_request(rng: np.random.Generator) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(
        model_name=str(pick(rng, TEXTS)),
        model_version=str(pick(rng, ["", "1", "12"])),
        id=str(pick(rng, TEXTS)),
    )
    random_parameters(message.parameters, rng)
    raw = bool(rng.integers(2))
    for i in range(int(rng.integers(0, 4))):
        datatype = str(pick(rng, [*CONTENTS_FIELD, "FP16", "BF16"]))
        shape = [int(d) for d in rng.integers(0, 4, int(rng.integers(0, 3)))]
        count = int(np.prod(shape)) if shape else 1
        if rng.random() < 0.1:
            count += 1  # a count that does not match the shape
        tensor = message.inputs.add(name=f"in{i}", datatype=datatype, shape=shape)
        random_parameters(tensor.parameters, rng)
        if raw:
            message.raw_input_contents.append(
                bytes(rng.integers(0, 256, 4 * count).astype(np.uint8))
            )
        elif datatype in CONTENTS_FIELD:
            field = CONTENTS_FIELD[datatype]
            getattr(tensor.contents, field).extend(typed_values(field, count, rng))
    for i in range(int(rng.integers(0, 3))):
        output = message.outputs.add(name=f"out{i}")
        random_parameters(output.parameters, rng)
    return message


REQUESTS = [random_request(np.random.default_rng(SEED + i)) for i in range(300)]


@pytest.mark.parametrize("index", range(len(REQUESTS)))
def test_a_request_means_what_protobuf_reads(index: int) -> None:
    data = REQUESTS[index].SerializeToString()
    ours = by_wire(data)
    assert ours[0] != "protobuf's", "the reader gave up on bytes protobuf itself wrote"
    assert ours == by_protobuf(data)


def test_the_generated_requests_cover_success_and_refusal() -> None:
    kinds = {by_wire(m.SerializeToString())[0] for m in REQUESTS}
    assert kinds == {"request", "refused"}


# -- forms written by hand ---------------------------------------------------------------------


def varint(value: int) -> bytes:
    """protobuf's own varint writer (negative numbers as 64-bit two's complement)."""
    return bytes(encoder._VarintBytes(value & ((1 << 64) - 1)))


def field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def number_field(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def fp32(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def tensor(*parts: bytes) -> bytes:
    return field(5, b"".join(parts))


FP32_INPUT = field(1, b"x") + field(2, b"FP32")

HAND_WRITTEN = {
    "shape unpacked": field(1, b"m")
    + tensor(FP32_INPUT, number_field(3, 1), number_field(3, 2), field(5, field(6, fp32([1, 2])))),
    "shape packed in two pieces": field(1, b"m")
    + tensor(
        FP32_INPUT, field(3, varint(1)), field(3, varint(2)), field(5, field(6, fp32([1, 2])))
    ),
    "fp32 packed in two pieces": field(1, b"m")
    + tensor(
        FP32_INPUT, field(3, varint(3)), field(5, field(6, fp32([1])) + field(6, fp32([2, 3])))
    ),
    "int32 unpacked and negative": field(1, b"m")
    + tensor(
        field(1, b"x"),
        field(2, b"INT32"),
        field(3, varint(2)),
        field(5, number_field(2, -5) + number_field(2, 2**31 - 1)),
    ),
    "int32 wider than 32 bits is cut as protobuf cuts it": field(1, b"m")
    + tensor(
        field(1, b"x"),
        field(2, b"INT32"),
        field(3, varint(1)),
        field(5, field(2, varint(2**40 + 7))),
    ),
    "uint32 and bool from wide varints": field(1, b"m")
    + tensor(
        field(1, b"a"),
        field(2, b"UINT32"),
        field(3, varint(1)),
        field(5, field(4, varint(2**35 + 1))),
    )
    + tensor(
        field(1, b"b"),
        field(2, b"BOOL"),
        field(3, varint(2)),
        field(5, field(1, varint(5) + varint(0))),
    ),
    "a string field twice: the last wins": field(1, b"first") + field(1, b"second"),
    "the same parameter twice: the last wins": field(
        4, field(1, b"k") + field(2, number_field(2, 1))
    )
    + field(4, field(1, b"k") + field(2, field(3, b"later"))),
    "a parameter with two values: the last wins": field(
        4, field(1, b"k") + field(2, number_field(1, 1) + number_field(5, 9))
    ),
    "a parameter without a value": field(4, field(1, b"k")),
    "a parameter without a key": field(4, field(2, number_field(2, 3))),
    "a double parameter": field(
        4, field(1, b"d") + field(2, varint(4 << 3 | 1) + struct.pack("<d", -0.5))
    ),
    "timeout parameter": field(1, b"m")
    + field(4, field(1, b"timeout") + field(2, number_field(2, 50))),
    "negative timeout is refused": field(4, field(1, b"timeout") + field(2, number_field(2, -1))),
    "empty contents present": field(1, b"m") + tensor(FP32_INPUT, field(5, b"")) + field(7, b""),
    "raw and contents together are refused": tensor(FP32_INPUT, field(5, b""))
    + field(7, fp32([1])),
    "bytes contents": tensor(
        field(1, b"s"),
        field(2, b"BYTES"),
        field(3, varint(2)),
        field(5, field(8, b"ab") + field(8, b"")),
    ),
    "an empty message": b"",
}


@pytest.mark.parametrize("name", HAND_WRITTEN)
def test_hand_written_forms_mean_what_protobuf_reads(name: str) -> None:
    data = HAND_WRITTEN[name]
    ours = by_wire(data)
    assert ours[0] != "protobuf's", "the reader gave up on a form it should read"
    assert ours == by_protobuf(data)


GIVEN_TO_PROTOBUF = {
    "an unknown field": field(1, b"m") + field(99, b"?"),
    "a field of another wire type": number_field(1, 3),
    "a name that is not UTF-8": field(1, b"\xff\xfe"),
    "a message cut short": field(1, b"model")[:-2],
    "a length past the end": varint(1 << 3 | 2) + varint(1 << 40),
    "a varint past 64 bits": varint(5 << 3 | 2) + b"\xff" * 10 + b"\x01",
    "fp32 one by one (fixed32 wire type)": tensor(
        FP32_INPUT, field(5, varint(6 << 3 | 5) + fp32([1]))
    ),
    "fp32 bytes not a multiple of four": tensor(FP32_INPUT, field(5, field(6, b"\x00" * 5))),
    "contents twice": tensor(FP32_INPUT, field(5, b""), field(5, b"")),
    "a group": varint(5 << 3 | 3) + varint(5 << 3 | 4),
}


@pytest.mark.parametrize("name", GIVEN_TO_PROTOBUF)
def test_what_the_reader_does_not_expect_goes_to_protobuf(name: str) -> None:
    data = GIVEN_TO_PROTOBUF[name]
    assert grpc_wire.read_infer(data) is None
    verdict, result = by_protobuf(data)
    if verdict == "undecodable":
        with pytest.raises(InvalidInput, match="not a valid ModelInferRequest"):
            grpc_wire.request_from(data)
    elif verdict == "request":
        assert meaning(grpc_wire.request_from(data)) == result
    else:
        with pytest.raises(InvalidInput) as info:
            grpc_wire.request_from(data)
        assert info.value.message == result


def test_mutated_requests_agree_with_protobuf_or_go_to_it() -> None:
    rng = np.random.default_rng(SEED)
    read_here = 0
    for i in range(3000):
        data = bytearray(REQUESTS[i % len(REQUESTS)].SerializeToString())
        if not data:
            continue
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(len(data)))
            action = int(rng.integers(3))
            if action == 0:
                data[at] = int(rng.integers(256))
            elif action == 1:
                del data[at]
            else:
                data.insert(at, int(rng.integers(256)))
        ours = by_wire(bytes(data))
        if ours[0] == "protobuf's":
            continue
        read_here += 1
        assert ours == by_protobuf(bytes(data)), bytes(data)
    assert read_here > 100  # the comparison above ran, not only the hand-over (170 of 3000)


def test_raw_contents_are_views_of_the_request() -> None:
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="x", datatype="FP32", shape=[2])
    message.raw_input_contents.append(fp32([1.5, -2.0]))
    request = grpc_wire.read_infer(message.SerializeToString())
    assert request is not None
    data = request.inputs[0].data
    np.testing.assert_array_equal(data, [1.5, -2.0])
    assert not data.flags.owndata


# -- replies -----------------------------------------------------------------------------------

ARRAYS: list[np.ndarray] = [
    np.arange(6, dtype=np.float32).reshape(2, 3),
    np.array([[True, False]]),
    np.array([-(2**63), 2**63 - 1], dtype=np.int64),
    np.array([2**64 - 1], dtype=np.uint64),
    np.array([1.5, np.nan], dtype=np.float16),
    np.zeros((0, 3), dtype=np.int8),
    np.array([b"ab", b"", "é".encode()], dtype=object),
    np.array(3.25, dtype=np.float64),  # a 0-d tensor
]
PARAMETER_VALUES: list[Any] = [
    True,
    False,
    0,
    -7,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2.5,
    -math.inf,
    "s",
    "",
    "ü",
    None,
]


@pytest.mark.parametrize("index", range(len(ARRAYS)))
def test_a_reply_is_the_message_protobuf_writes(index: int) -> None:
    from rosettaserve.core.dtypes import from_numpy

    data = ARRAYS[index]
    parameters = {
        f"k{i}": v for i, v in enumerate(PARAMETER_VALUES[index:] + PARAMETER_VALUES[:index])
    }
    response = InferenceResponse(
        model_name=TEXTS[index % len(TEXTS)],
        model_version=str(index),
        outputs=[
            Tensor("OUTPUT0", from_numpy(data.dtype).name, data.shape, data, parameters),
            Tensor("ü", from_numpy(data.dtype).name, data.shape, data),
        ],
        id=None if index % 2 else "req-1",
        parameters=dict(list(parameters.items())[:index]),
    )
    written = grpc_wire.write_infer(response)
    assert written is not None
    assert pb.ModelInferResponse.FromString(written) == encode_infer(response)


def test_a_reply_with_an_int_beyond_64_bits_goes_to_protobuf() -> None:
    data = np.zeros(1, dtype=np.float32)
    response = InferenceResponse("m", "1", [Tensor("y", "FP32", (1,), data, {"big": 2**64})])
    assert grpc_wire.write_infer(response) is None
    with pytest.raises(ValueError, match="out of range"):  # what protobuf says of it
        grpc_wire.reply_bytes(response)


def test_model_named_skims_the_model_and_version_from_a_request() -> None:
    """The access line's model: the two fields wherever they stand among the others (after the
    tensors too), none of the rest read; anything the reader would not take names none."""
    request = pb.ModelInferRequest(model_name="simple", model_version="3", id="x")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[2])
    request.raw_input_contents.append(np.ones(2, "<f4").tobytes())
    data = request.SerializeToString()
    assert grpc_wire.model_named(data) == ("simple", "3")
    moved = data[len(request.model_name) + 2 :] + b"\x0a\x06simple"  # model_name last
    assert grpc_wire.model_named(moved) == ("simple", "3")
    assert grpc_wire.model_named(pb.ModelInferRequest(model_name="m").SerializeToString()) == (
        "m",
        "",
    )
    assert grpc_wire.model_named(b"\x08\x01") == ("", "")  # a varint field: not a request
    assert grpc_wire.model_named(data + b"\x3a\x10ab") == ("", "")  # a field cut short
