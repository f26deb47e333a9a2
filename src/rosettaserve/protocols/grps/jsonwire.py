"""grps over HTTP: request bodies -> GrpsMessage / Payload, replies -> bodies. Pure functions.

JSON is protobuf's JSON mapping of GrpsMessage (proto field names, enums by name or number,
unknown keys ignored; NaN and the infinities quoted, "NaN", "Infinity", "-Infinity");
``ndarray`` is the one form outside it, a nested array of numbers, where they are the bare
tokens NaN, Infinity, -Infinity as in every other JSON body (core/json_nonfinite.py).
"""

from __future__ import annotations

import binascii
import math
from base64 import b64decode
from typing import Any

import numpy as np
import orjson
from google.protobuf import json_format

from rosettaserve.core import dtypes, json_nonfinite
from rosettaserve.core.codec import (
    beyond_integers,
    check_range,
    check_shape,
    from_json,
    narrow,
    range_error,
)
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.types import InferenceResponse, Tensor
from rosettaserve.protocols.grps import convert
from rosettaserve.protocols.grps.pb import grps_pb2 as pb

JSON = "application/json"
OCTETS = "application/octet-stream"
_FP32 = dtypes.lookup("FP32")
_JSON_NAMES = {"binData": "bin_data", "sB": "s_b", "sF": "s_f"}
_JSON_NAMES |= {"flatFloat32": "flat_float32", "flatFloat16": "flat_float16"}
_FLOAT_FIELDS = {"flat_float32": _FP32, "flat_float16": dtypes.lookup("FP16")}  # protobuf floats
_INT_FIELDS = {
    field: dtypes.lookup(v2)
    for v2, field, carrier in convert.DATATYPES.values()
    if carrier in ("int32", "uint32", "int64")
}
_JSON_NAMES |= {"flat" + f[5:].capitalize(): f for f in _INT_FIELDS}  # flatUint8, flatInt64
_MISSING = object()
_DT_NAMES = frozenset(pb.DataType.keys())


def media_type(header: str | None) -> str:
    """The media type of a Content-Type header, without parameters such as charset."""
    return (header or "").split(";", 1)[0].strip().lower()


def parse_message(
    content_type: str | None, body: bytes | bytearray, allow_empty: bool = False
) -> Any:
    """A GrpsMessage from a JSON body, or the raw body as bin_data. ndarray is refused here."""
    msg, ndarray = _parse(content_type, body, allow_empty)
    if ndarray is not _MISSING:
        raise InvalidInput("ndarray is accepted by infer/predict only")
    return msg


def parse_predict(content_type: str | None, body: bytes | bytearray) -> convert.Payload:
    msg, ndarray = _parse(content_type, body, allow_empty=False)
    if ndarray is _MISSING:
        return convert.payload_from_message(msg)
    if msg.WhichOneof("data_oneof") is not None:
        raise InvalidInput("send one data field: ndarray cannot come with another one")
    return convert.Payload("ndarray", msg.model, [ndarray_tensor(ndarray)])


def _parse(content_type: str | None, body: bytes | bytearray, allow_empty: bool) -> tuple[Any, Any]:
    if allow_empty and not body.strip():
        return pb.GrpsMessage(), _MISSING
    kind = media_type(content_type)
    if kind == OCTETS:
        return pb.GrpsMessage(bin_data=bytes(body)), _MISSING  # (protobuf takes no bytearray)
    if kind != JSON:
        shown = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
        raise InvalidInput(f"{shown}: send {JSON} (a GrpsMessage) or {OCTETS} (bin_data)")
    if not body.strip():
        raise InvalidInput("the request body is empty: send a GrpsMessage as JSON")
    doc = _json_object(body)
    ndarray = doc.pop("ndarray", _MISSING)
    _check_doc(doc)
    try:
        msg = json_format.ParseDict(doc, pb.GrpsMessage(), ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise InvalidInput(f"the body is not a valid GrpsMessage: {exc}") from None
    return msg, ndarray


def _json_object(body: bytes | bytearray) -> dict[str, Any]:
    try:
        doc = json_nonfinite.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidInput("the request body must be a JSON object (a GrpsMessage)")
    return doc


def _check_doc(doc: dict[str, Any]) -> None:
    """What ParseDict with ignore_unknown_fields would let through silently."""
    _proto_names(doc)
    if "bin_data" in doc:
        raise InvalidInput(
            f"bin_data cannot travel in JSON: send the raw bytes as the body with "
            f"Content-Type: {OCTETS}"
        )
    tensors = _get(_get(doc, "gtensors", dict), "tensors", list)
    for i, tensor in enumerate(tensors or []):
        if not isinstance(tensor, dict):
            continue
        _proto_names(tensor)
        dtype, label = tensor.get("dtype"), tensor.get("name") or f"#{i}"
        if isinstance(dtype, str) and dtype not in _DT_NAMES and not dtype.isdigit():
            raise InvalidInput(
                f"tensor '{label}' has an unknown dtype {dtype!r}; "
                f"expected one of {', '.join(convert.DATATYPES)} (or its number)"
            )
        for field, kind in _FLOAT_FIELDS.items():
            _narrow_floats(tensor, field, kind, str(label))
        _check_integers(tensor, str(label))
    gmap = _get(doc, "gmap", dict)
    if gmap:
        _proto_names(gmap)
    gmap_floats = _get(gmap, "s_f", dict) or {}
    for key in gmap_floats:
        _narrow_floats(gmap_floats, key, _FP32, key)
    for key, value in (_get(gmap, "s_b", dict) or {}).items():
        if not _is_base64(value):
            raise InvalidInput(f"gmap s_b['{key}'] is not base64 (s_b values travel as base64)")


def _proto_names(holder: dict[str, Any]) -> None:
    """The fields checked here under their proto names: protobuf's reader also takes their JSON
    names ("binData", "flatFloat32"), which would pass by the checks (both at once it refuses)."""
    for json_name, name in _JSON_NAMES.items():
        if json_name in holder and name not in holder:
            holder[name] = holder.pop(json_name)


def _as_number(item: Any, label: str) -> int | float | None:
    """A JSON number, or the finite number in a string that protobuf's reader takes for a float
    field (it reads them with ``float()``); None for anything else, NaN and infinities included."""
    if type(item) in (int, float):
        return item  # type: ignore[no-any-return]
    if type(item) is not str:
        return None
    try:
        number = float(item)
    except ValueError:
        return None
    if math.isnan(number) or item.strip().lstrip("+-").lower() in ("inf", "infinity"):
        return None
    if math.isinf(number):
        raise InvalidInput(f"tensor '{label}' holds {item[:40]!r}, beyond any float")
    return number


def _check_integers(tensor: dict[str, Any], label: str) -> None:
    """The values of a tensor's integer field against its datatype's range: a 400 naming the
    tensor, the value and the range. protobuf's reader names the field only, and takes an
    integer literal past 64 bits (which the JSON reader makes a float) as the nearest 64-bit
    value. Anything that is not an integer is left to protobuf's reader to refuse."""
    for field, dtype in _INT_FIELDS.items():
        items = tensor.get(field)
        for item in items if isinstance(items, list) else ():
            number = item
            if type(item) is str:
                try:
                    number = int(item)
                except ValueError:
                    continue
            if type(number) is int:
                check_range(number, number, dtype, label)
            elif beyond_integers(number, dtype):
                raise range_error(number, dtype, label)


def _narrow_floats(holder: dict[str, Any], key: str, dtype: dtypes.DType, label: str) -> None:
    """The JSON numbers at ``holder[key]`` (one, or in a list) checked against the float type
    they fill, as every protocol checks them (core.codec.narrow: a 400 naming the tensor), and
    replaced by the values they round to: protobuf's reader refuses FP32's largest value as
    clients print it (``3.4028235e+38``, a hair above it), and as protobuf itself writes it.
    Numbers in strings count too (protobuf reads "1e39" as a float, unchecked). Anything else
    ("NaN", "Infinity", nulls, booleans) is left to protobuf's reader."""
    value = holder.get(key)
    single = _as_number(value, label) is not None
    items = [value] if single else value
    if not isinstance(items, list):
        return
    numbers = [_as_number(item, label) for item in items]
    at = [i for i, number in enumerate(numbers) if number is not None]
    if not at:
        return
    try:
        wide = np.array([numbers[i] for i in at], dtype=np.float64)
    except OverflowError:
        raise InvalidInput(
            f"tensor '{label}' holds a number outside the {dtype.name} range"
        ) from None
    narrowed = narrow(wide, dtype, label).tolist()
    if single or len(at) == len(items):
        holder[key] = narrowed[0] if single else narrowed
        return
    mixed = list(items)
    for i, number in zip(at, narrowed, strict=True):
        mixed[i] = number
    holder[key] = mixed


def _get(doc: Any, key: str, kind: type) -> Any:
    value = doc.get(key) if isinstance(doc, dict) else None
    return value if isinstance(value, kind) else None


def _is_base64(value: Any) -> bool:
    """Standard or URL-safe alphabet, padding optional (as protobuf's JSON mapping accepts)."""
    if not isinstance(value, str):
        return True  # ParseDict reports the wrong type itself
    text = value.replace("-", "+").replace("_", "/")
    try:
        b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def ndarray_tensor(value: Any) -> Tensor:
    """A nested array of numbers as one unnamed FP32 tensor, its shape read from the nesting."""
    dims = []
    probe = value
    while isinstance(probe, list):
        dims.append(len(probe))
        if not probe:
            raise InvalidInput("ndarray has an empty dimension; send at least one number")
        probe = probe[0]
    shape = check_shape(dims, "ndarray")
    data = from_json(value, _FP32, shape, "ndarray")
    return Tensor("", "FP32", shape, data)


# -- replies -----------------------------------------------------------------------------------


def encode(msg: Any) -> bytes:
    return orjson.dumps(json_format.MessageToDict(msg, preserving_proto_field_name=True))


def encode_ndarray(response: InferenceResponse) -> bytes:
    """``?return-ndarray=true``: the single FP32 output as a nested array."""
    outputs = response.outputs
    if len(outputs) != 1 or outputs[0].datatype != "FP32":
        got = [f"{t.name} ({t.datatype})" for t in outputs]
        raise InvalidInput(
            f"return-ndarray needs a single FP32 output; model '{response.model_name}' "
            f"returned {got}"
        )
    head = json_format.MessageToDict(
        convert.ok(model=f"{response.model_name}-{response.model_version}"),
        preserving_proto_field_name=True,
    )
    data = outputs[0].data
    if data.ndim:
        head["ndarray"] = json_nonfinite.array(np.ascontiguousarray(data))
    else:  # orjson writes arrays of one or more dims
        value = float(str(data.reshape(-1)[0]))
        finite = math.isfinite(value)
        head["ndarray"] = value if finite else orjson.Fragment(json_nonfinite.token(value).encode())
    return orjson.dumps(head, option=orjson.OPT_SERIALIZE_NUMPY)


def encode_any(response: InferenceResponse, form: str) -> tuple[bytes, str]:
    """The reply body and its content type: raw bytes for a bin_data answer, else JSON."""
    msg = convert.to_message(response, form)
    if msg.WhichOneof("data_oneof") == "bin_data":
        return msg.bin_data, OCTETS
    return encode(msg), JSON


def stream_line(msg: Any) -> bytes:
    """One message of a streamed reply: compact JSON and a newline, one chunk each."""
    return encode(msg) + b"\n"
