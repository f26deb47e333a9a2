"""Predict's request read from protobuf's wire format directly, as OIP's ModelInfer is.

A small Predict call spent more in reading its parsed message (each field read builds a Python
object: the model spec, the inputs map, each TensorProto and its shape) than in TF Serving's own
checks. The rpc therefore takes the request as bytes: ``read`` gives the ``Predict`` that the
rest of the call works on, straight from the wire, for the request ``tf.make_tensor_proto``'s
users send (a model spec, tensors in ``tensor_content``, an output filter). Anything else — a
tensor in typed values or strings, a named dim, an unknown rank, a field given twice, Predict's
streaming or request options, anything malformed — is left to protobuf: the message is parsed
and read into the same ``Predict`` (``from_message``). Field numbers are those of
tensorflow_serving/apis/predict.proto, model.proto and TensorFlow's tensor.proto and
tensor_shape.proto.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from google.protobuf.message import DecodeError

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.protowire import (
    LENGTH,
    VARINT,
    Unexpected,
    length_field,
    signed64,
    span,
    text,
    varint,
)
from rosettaserve.protocols.tfserving import messages
from rosettaserve.protocols.tfserving.status import Target

DT_STRING: Final = 7  # tensorflow.DataType: its values travel in string_val, never here
# the keys (field number << 3 | wire type) of TensorProto's fields read here, and of
# TensorShapeProto.dim and Dim.size
_DTYPE: Final = 1 << 3 | VARINT
_SHAPE: Final = 2 << 3 | LENGTH
_VERSION_NUMBER: Final = 3 << 3 | VARINT
_CONTENT: Final = 4 << 3 | LENGTH
_DIM: Final = 2 << 3 | LENGTH
_SIZE: Final = 1 << 3 | VARINT


class Content:
    """A TensorProto whose values are all in ``tensor_content``: where they lie in the
    request's bytes (not copied; no memoryview made: the array is made over the bytes
    themselves, ``tensorproto.content_array``)."""

    __slots__ = ("data", "dims", "dtype", "end", "start")

    def __init__(
        self, dtype: int, dims: tuple[int, ...], data: bytes, start: int, end: int
    ) -> None:
        self.dtype = dtype  # tensorflow.DataType
        self.dims = dims
        self.data = data  # the request's bytes
        self.start = start  # tensor_content is data[start:end]
        self.end = end


@dataclass(init=False, slots=True)  # compiled, a dataclass's own __init__ stays interpreted
class Predict:
    target: Target
    signature_name: str
    inputs: dict[str, Any]  # alias -> Content, or a TensorProto message
    output_filter: list[str]

    def __init__(
        self, target: Target, signature_name: str, inputs: dict[str, Any], output_filter: list[str]
    ) -> None:
        self.target = target
        self.signature_name = signature_name
        self.inputs = inputs
        self.output_filter = output_filter


def request(data: bytes) -> Predict:
    """The request, read here or by protobuf."""
    read_here = read(data)
    if read_here is not None:
        return read_here
    try:
        message = messages.PredictRequest.FromString(data)
    except DecodeError as exc:
        raise InvalidInput(f"the request is not a valid message: {exc}") from None
    return from_message(message)


def from_message(message: Any) -> Predict:
    """A parsed PredictRequest as a ``Predict``."""
    return Predict(
        target(message),
        message.model_spec.signature_name,
        dict(message.inputs),
        list(message.output_filter),
    )


def target(message: Any) -> Target:
    """The version a request message's ModelSpec names (every rpc's), with TF Serving's
    errors."""
    spec = message.model_spec
    choice = spec.WhichOneof("version_choice")
    version = spec.version.value if choice == "version" else None
    label = spec.version_label if choice == "version_label" else None
    return target_of(message.HasField("model_spec"), spec.name, version, label)


def target_of(present: bool, name: str, version: int | None, label: str | None) -> Target:
    """The version a ModelSpec names, with TF Serving's errors."""
    if not present:
        raise InvalidInput("Missing ModelSpec")
    if not name:
        raise InvalidInput("ModelSpec has no name specified.")
    if version is not None:
        return Target(name, version)
    if label is not None:
        return Target(name, label=label)
    return Target(name)


def read(data: bytes) -> Predict | None:
    """The request read from its bytes, or None: parse it with protobuf.

    Raises InvalidInput (TF Serving's model spec errors) for a well-formed message."""
    try:
        return _request(data)
    except Unexpected:
        return None


def _request(data: bytes) -> Predict:
    spec: tuple[str, int | None, str | None, str] | None = None
    inputs: dict[str, Any] = {}
    output_filter: list[str] = []
    at, end = 0, len(data)
    while at < end:
        number, start, at = length_field(data, at, end)
        if number == 2:
            alias, tensor = _input(data, start, at)
            inputs[alias] = tensor  # a map: the last entry of a key wins, as protobuf's
        elif number == 3:
            output_filter.append(text(data, start, at))
        elif number == 1 and spec is None:
            spec = _model_spec(data, start, at)
        else:  # a second model_spec (merged by protobuf), streaming or request options
            raise Unexpected
    if spec is None:
        return Predict(target_of(False, "", None, None), "", inputs, output_filter)
    name, version, label, signature_name = spec
    return Predict(target_of(True, name, version, label), signature_name, inputs, output_filter)


def _model_spec(data: bytes, at: int, end: int) -> tuple[str, int | None, str | None, str]:
    """(name, version, version_label, signature_name): version and label are a oneof (the last
    one given is the one set)."""
    name = signature_name = ""
    version: int | None = None
    label: str | None = None
    while at < end:
        number, start, at = length_field(data, at, end)
        if number == 1:
            name = text(data, start, at)
        elif number == 2:
            version, label = _int64_value(data, start, at), None
        elif number == 4:
            version, label = None, text(data, start, at)
        elif number == 3:
            signature_name = text(data, start, at)
        else:
            raise Unexpected
    return name, version, label, signature_name


def _int64_value(data: bytes, at: int, end: int) -> int:
    """google.protobuf.Int64Value's value (0 when absent)."""
    if at == end:
        return 0
    key, at = varint(data, at, end)
    if key != (1 << 3 | VARINT):
        raise Unexpected
    value, at = varint(data, at, end)
    if at != end:
        raise Unexpected
    return signed64(value)


def _input(data: bytes, at: int, end: int) -> tuple[str, Content]:
    """One entry of the inputs map: (key, value)."""
    alias = ""
    tensor: Content | None = None
    while at < end:
        number, start, at = length_field(data, at, end)
        if number == 1:
            alias = text(data, start, at)
        elif number == 2 and tensor is None:
            tensor = _tensor(data, start, at)
        else:
            raise Unexpected
    if tensor is None:  # an empty TensorProto: protobuf's reading says what it holds
        raise Unexpected
    return alias, tensor


def _tensor(data: bytes, at: int, end: int) -> Content:
    """A TensorProto of dtype, shape and ``tensor_content`` (its version_number skipped)."""
    dtype = 0
    dims: tuple[int, ...] | None = None
    first = last = 0  # tensor_content's span, empty until read
    while at < end:
        key, at = varint(data, at, end)
        if key in (_DTYPE, _VERSION_NUMBER):
            value, at = varint(data, at, end)
            if key == _DTYPE:
                dtype = signed64(value)
        elif key == _SHAPE and dims is None:
            start, at = span(data, at, end)
            dims = _shape(data, start, at)
        elif key == _CONTENT and first == last:
            first, at = span(data, at, end)
            last = at
        else:
            raise Unexpected
    if first == last or dtype == DT_STRING:  # typed values (or none): protobuf's reading
        raise Unexpected
    return Content(dtype, () if dims is None else dims, data, first, last)


def _shape(data: bytes, at: int, end: int) -> tuple[int, ...]:
    """A TensorShapeProto of unnamed dims (no unknown_rank)."""
    dims: list[int] = []
    while at < end:
        if data[at] != _DIM:
            raise Unexpected
        start, at = span(data, at + 1, end)
        if start == at:  # Dim {}: size 0
            dims.append(0)
            continue
        if data[start] != _SIZE:
            raise Unexpected
        size, stop = varint(data, start + 1, at)
        if stop != at:
            raise Unexpected
        dims.append(signed64(size))
    return tuple(dims)
