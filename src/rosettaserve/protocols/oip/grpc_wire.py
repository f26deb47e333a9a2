"""ModelInfer's messages read from and written to protobuf's wire format directly.

Reading a field of a protobuf message from Python builds an object each time, and a small
ModelInfer call spent more in those reads (and in filling the reply message) than in the
model. The unary rpc therefore takes the request as bytes and returns the reply as bytes:
``read_infer`` builds core's request straight from the wire and ``write_infer`` writes the
reply. Both cover every field of the two messages. The reader is strict: an unknown field, a
field of an unexpected wire type, a string that is not UTF-8, a truncated or overlong value,
an input's contents twice or fixed-width numbers in their unpacked form make it return None, and
the caller parses the bytes with protobuf, which accepts or rejects them as it always has.
Field numbers are those of grpc_service.proto.
"""

from __future__ import annotations

import struct
from typing import Any, Final

import numpy as np
from google.protobuf.message import DecodeError

from rosettaserve.core import dtypes
from rosettaserve.core.codec import INLINE_ELEMENTS, check_elements, raw_bytes
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.executor import LET_OTHERS_RUN, LargeWork, let_others_run
from rosettaserve.core.protowire import (
    FIXED64,
    LENGTH,
    VARINT,
    Unexpected,
    length_field,
    signed64,
    span,
    text,
    varint,
)
from rosettaserve.core.types import InferenceRequest, InferenceResponse, Parameters, RequestedOutput
from rosettaserve.protocols.oip.grpc_convert import (
    InputFields,
    build_request,
    encode_infer,
    parameter_choice,
    parse_infer,
)
from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb

# Final: compiled, these are constants or C statics, not a lookup in the module's dict (a small
# ModelInfer call looked up some 40 of them) [cost: final-static]
_U64: Final = 1 << 64
_ONE_BYTE: Final = [bytes((value,)) for value in range(0x80)]  # the varints of 0-127
_DOUBLE: Final = struct.Struct("<d")

# InferTensorContents: field number -> (field name, how its values travel)
_CONTENTS: Final = {
    1: ("bool_contents", "bool"),
    2: ("int_contents", "int32"),
    3: ("int64_contents", "int64"),
    4: ("uint_contents", "uint32"),
    5: ("uint64_contents", "uint64"),
    6: ("fp32_contents", "<f4"),  # fixed width: read as little-endian arrays
    7: ("fp64_contents", "<f8"),
    8: ("bytes_contents", "bytes"),
}
_FIXED: Final[dict[str, np.dtype[Any]]] = {"<f4": np.dtype("<f4"), "<f8": np.dtype("<f8")}
_PARAMETER_FIELDS: Final = {"bool_param": 1, "int64_param": 2, "uint64_param": 5}  # the varint ones


def request_from(data: bytes, inline: bool = False) -> InferenceRequest:
    """Core's request from a serialized ModelInferRequest: read here, or by protobuf
    (``inline``: on the event loop, LargeWork for contents too large to decode there)."""
    request = read_infer(data, inline)
    if request is not None:
        return request
    try:
        message = pb.ModelInferRequest.FromString(data)
    except DecodeError as exc:
        raise InvalidInput(f"the request is not a valid ModelInferRequest: {exc}") from None
    return parse_infer(message, inline)


def reply_bytes(response: InferenceResponse, inline: bool = False) -> bytes:
    """The serialized ModelInferResponse: written here, or by protobuf (``inline``: LargeWork
    for a BYTES output too large to encode on the event loop)."""
    written = write_infer(response, inline)
    if written is not None:
        return written
    return bytes(encode_infer(response, inline).SerializeToString())


def read_infer(data: bytes, inline: bool = False) -> InferenceRequest | None:
    """Core's request from a serialized ModelInferRequest, or None: parse it with protobuf.

    Raises InvalidInput, as ``grpc_convert.parse_infer`` does, for a well-formed message that
    asks for something the server refuses."""
    try:
        return _request(data, inline)
    except Unexpected:
        return None


def model_named(data: bytes) -> tuple[str, str]:
    """A ModelInferRequest's model_name and model_version, its other fields skipped over (not
    read); ("", "") where the message is not one the reader takes. For the access line."""
    name = version = ""
    at, end = 0, len(data)
    try:
        while at < end:
            number, start, at = length_field(data, at, end)
            if number == 1:
                name = text(data, start, at)
            elif number == 2:
                version = text(data, start, at)
    except Unexpected:
        return "", ""
    return name, version


def _request(data: bytes, inline: bool) -> InferenceRequest:
    model_name = model_version = request_id = ""
    parameters: Parameters = {}
    inputs: list[InputFields] = []
    outputs: list[RequestedOutput] = []
    raw: list[Any] = []
    view: memoryview | None = None
    at, end = 0, len(data)
    while at < end:
        number, start, at = length_field(data, at, end)
        if number == 5:
            inputs.append(_input(data, start, at, inline))
        elif number == 7:
            view = memoryview(data) if view is None else view
            raw.append(view[start:at])  # no copy: the tensor is a view of the request
        elif number == 1:
            model_name = text(data, start, at)
        elif number == 2:
            model_version = text(data, start, at)
        elif number == 3:
            request_id = text(data, start, at)
        elif number == 4:
            _map_entry(data, start, at, parameters)
        elif number == 6:
            outputs.append(_output(data, start, at))
        else:
            raise Unexpected
    return build_request(  # checks the request, and raises InvalidInput, not Unexpected
        inputs,
        raw,
        model_name=model_name,
        model_version=model_version,
        request_id=request_id,
        parameters=parameters,
        outputs=outputs,
        inline=inline,
    )


def _input(data: bytes, at: int, end: int, inline: bool) -> InputFields:
    name = datatype = ""
    shape: list[int] = []
    parameters: Parameters = {}
    contents: dict[str, Any] | None = None
    while at < end:
        key, at = varint(data, at, end)
        number, wire = key >> 3, key & 7
        if number == 3 and wire == VARINT:  # shape, unpacked
            value, at = varint(data, at, end)
            shape.append(signed64(value))
            continue
        if wire != LENGTH:
            raise Unexpected
        start, at = span(data, at, end)
        if number == 1:
            name = text(data, start, at)
        elif number == 2:
            datatype = text(data, start, at)
        elif number == 3:
            while start < at:
                value, start = varint(data, start, at)
                shape.append(signed64(value))
        elif number == 4:
            _map_entry(data, start, at, parameters)
        elif number == 5 and contents is None:
            contents = _contents(data, start, at, name, inline)
        else:
            raise Unexpected  # unknown, or contents twice (protobuf would merge them)
    return InputFields(name, datatype, shape, parameters, contents)


def _output(data: bytes, at: int, end: int) -> RequestedOutput:
    name = ""
    parameters: Parameters = {}
    while at < end:
        number, start, at = length_field(data, at, end)
        if number == 1:
            name = text(data, start, at)
        elif number == 2:
            _map_entry(data, start, at, parameters)
        else:
            raise Unexpected
    return RequestedOutput(name, parameters)


def _contents(data: bytes, at: int, end: int, name: str, inline: bool) -> dict[str, Any]:
    """InferTensorContents as {field name: values}: fixed-width numbers as little-endian
    arrays over the request's bytes, varints as lists, bytes as a list of bytes. The values
    read one by one are bounded as codec.check_elements bounds a tensor's (``name``: the
    input's, when its name came first): LargeWork past INLINE_ELEMENTS of them ``inline``, and
    InvalidInput past MAX_BYTES_ELEMENTS bytes values."""
    contents: dict[str, Any] = {}
    taken = 0  # values read one by one
    while at < end:
        key, at = varint(data, at, end)
        number, wire = key >> 3, key & 7
        if number not in _CONTENTS:
            raise Unexpected
        field, kind = _CONTENTS[number]
        if wire == VARINT and kind not in _FIXED and kind != "bytes":
            value, at = varint(data, at, end)
            contents.setdefault(field, []).append(_narrow(value, kind))
            taken = _counted(taken, inline)
            continue
        if wire != LENGTH:
            raise Unexpected  # fixed-width numbers one by one: rare, left to protobuf
        start, at = span(data, at, end)
        if kind in _FIXED:
            dtype = _FIXED[kind]
            if (at - start) % dtype.itemsize:
                raise Unexpected
            array = np.frombuffer(data, dtype, (at - start) // dtype.itemsize, start)
            before = contents.get(field)  # a packed field in several pieces is one list
            contents[field] = array if before is None else np.concatenate((before, array))
        elif kind == "bytes":
            values = contents.setdefault(field, [])
            values.append(data[start:at])
            taken = _counted(taken, inline)
            if taken > INLINE_ELEMENTS:
                check_elements(len(values), name, inline)
        else:
            values = contents.setdefault(field, [])
            taken = _packed(values, kind, data, start, at, taken=taken, inline=inline)
    return contents


def _packed(
    values: list[Any], kind: str, data: bytes, at: int, end: int, *, taken: int, inline: bool
) -> int:
    """Packed varints added to ``values``; the values read one by one so far (``taken``)."""
    while at < end:
        value, at = varint(data, at, end)
        values.append(_narrow(value, kind))
        taken = _counted(taken, inline)
    return taken


def _counted(taken: int, inline: bool) -> int:
    """One more value read one by one: LargeWork past the event loop's budget (``inline``);
    off the loop, the interpreter offered to the loop now and then."""
    taken += 1
    if inline:
        if taken > INLINE_ELEMENTS:
            raise LargeWork
    elif taken & LET_OTHERS_RUN == LET_OTHERS_RUN:
        let_others_run()
    return taken


def _narrow(value: int, kind: str) -> Any:
    """A varint as the field's type reads it (protobuf truncates wider values, as C does)."""
    if kind == "int64":
        return signed64(value)
    if kind == "int32":
        value &= 0xFFFFFFFF
        return value - (1 << 32) if value >= 1 << 31 else value
    if kind == "uint32":
        return value & 0xFFFFFFFF
    if kind == "bool":
        return value != 0
    return value  # uint64


def _map_entry(data: bytes, at: int, end: int, into: Parameters) -> None:
    """One entry of a map<string, InferParameter>; a later entry for the same key wins."""
    key = ""
    value: Any = None
    while at < end:
        number, start, at = length_field(data, at, end)
        if number == 1:
            key = text(data, start, at)
        elif number == 2:
            value = _parameter(data, start, at)
        else:
            raise Unexpected
    into[key] = value


def _parameter(data: bytes, at: int, end: int) -> Any:
    """An InferParameter's value (its oneof: the last field on the wire wins)."""
    value: Any = None
    while at < end:
        key, at = varint(data, at, end)
        number, wire = key >> 3, key & 7
        if wire == VARINT and number in (1, 2, 5):
            raw, at = varint(data, at, end)
            # branches, not one conditional expression: compiled, that would join bool and
            # int into int, and a bool_param would arrive as 0 or 1
            if number == 1:
                value = raw != 0
            elif number == 2:
                value = signed64(raw)
            else:
                value = raw
        elif wire == LENGTH and number == 3:
            start, at = span(data, at, end)
            value = text(data, start, at)
        elif wire == FIXED64 and number == 4:
            if at + 8 > end:
                raise Unexpected
            value = _DOUBLE.unpack_from(data, at)[0]
            at += 8
        else:
            raise Unexpected
    return value


def write_infer(response: InferenceResponse, inline: bool = False) -> bytes | None:
    """The serialized ModelInferResponse ``grpc_convert.encode_infer`` would build, or None
    for what protobuf has to judge (an int beyond 64 bits, a str that is not UTF-8)."""
    try:
        return _response(response, inline)
    except UnicodeEncodeError:
        return None


def _response(response: InferenceResponse, inline: bool) -> bytes | None:
    parts: list[bytes] = []
    _text_field(parts, 1, response.model_name)
    _text_field(parts, 2, response.model_version)
    _text_field(parts, 3, response.id or "")
    for key, value in response.parameters.items():
        entry = _parameter_entry(key, value)
        if entry is None:
            return None
        _length_prefix(parts, 4, len(entry))
        parts.append(entry)
    for tensor in response.outputs:
        out = _output_tensor(tensor.name, tensor.datatype, tensor.shape, tensor.parameters)
        if out is None:
            return None
        _length_prefix(parts, 5, len(out))
        parts.append(out)
    for tensor in response.outputs:
        raw = raw_bytes(tensor.data, dtypes.lookup(tensor.datatype), inline)
        _length_prefix(parts, 6, len(raw))
        parts.append(raw)
    return b"".join(parts)


def _output_tensor(
    name: str, datatype: str, shape: tuple[int, ...], parameters: Parameters
) -> bytes | None:
    parts: list[bytes] = []
    _text_field(parts, 1, name)
    _text_field(parts, 2, datatype)
    if shape:
        dims = b"".join([_varint_bytes(dim + _U64 if dim < 0 else dim) for dim in shape])
        _length_prefix(parts, 3, len(dims))
        parts.append(dims)
    for key, value in parameters.items():
        entry = _parameter_entry(key, value)
        if entry is None:
            return None
        _length_prefix(parts, 4, len(entry))
        parts.append(entry)
    return b"".join(parts)


def _parameter_entry(key: str, value: Any) -> bytes | None:
    """A map entry {key, InferParameter}, the value in the field ``parameter_choice`` names."""
    field, held = parameter_choice(value)
    if field == "string_param":
        utf8 = held.encode()
        param = _varint_bytes(3 << 3 | LENGTH) + _varint_bytes(len(utf8)) + utf8
    elif field == "double_param":
        param = _varint_bytes(4 << 3 | FIXED64) + _DOUBLE.pack(held)
    else:
        number = _PARAMETER_FIELDS[field]
        number_value = int(held)
        if not -(1 << 63) <= number_value < _U64:
            return None
        encoded = number_value + _U64 if number_value < 0 else number_value
        param = _varint_bytes(number << 3 | VARINT) + _varint_bytes(encoded)
    parts: list[bytes] = []
    _text_field(parts, 1, key, always=True)
    _length_prefix(parts, 2, len(param))
    parts.append(param)
    return b"".join(parts)


def _text_field(parts: list[bytes], number: int, text: str, always: bool = False) -> None:
    if text or always:
        encoded = text.encode()
        _length_prefix(parts, number, len(encoded))
        parts.append(encoded)


def _length_prefix(parts: list[bytes], number: int, length: int) -> None:
    parts.append(_varint_bytes(number << 3 | LENGTH))
    parts.append(_varint_bytes(length))


def _varint_bytes(value: int) -> bytes:
    if value < 0x80:
        return _ONE_BYTE[value]
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
