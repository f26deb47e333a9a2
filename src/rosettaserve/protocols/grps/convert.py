"""grps GrpsMessage <-> core tensors. Pure functions: no I/O and no data plane.

How a grps payload meets a model (the README says the same):
- ``gtensors``: one tensor per GenericTensor, named by its name; unnamed tensors take the
  model's declared inputs in order.
- ``str_data`` / ``bin_data``: a one-element BYTES tensor for a model whose single input is BYTES.
- ``gmap``: one one-element tensor per key, typed by its map (s_s/s_b BYTES, s_i32 INT32,
  s_i64 INT64, s_f FP32, s_d FP64).
- ``ndarray`` (REST only): one unnamed FP32 tensor.
The answer takes the request's form when the outputs fit it, else ``gtensors``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rosettaserve.core import dtypes
from rosettaserve.core.codec import (
    INLINE_ELEMENTS,
    as_bytes,
    bytes_array,
    check_elements,
    check_range,
    check_shape,
    element_count,
    from_values,
)
from rosettaserve.core.errors import InvalidInput, ServingError
from rosettaserve.core.executor import LargeWork
from rosettaserve.core.types import InferenceResponse, Tensor, TensorSpec
from rosettaserve.protocols.grps.pb import grps_pb2 as pb

# grps DataType -> (V2 datatype, the GenericTensor field that carries it, that field's numpy type)
DATATYPES: dict[str, tuple[str, str, str]] = {
    "DT_UINT8": ("UINT8", "flat_uint8", "uint32"),
    "DT_INT8": ("INT8", "flat_int8", "int32"),
    "DT_INT16": ("INT16", "flat_int16", "int32"),
    "DT_INT32": ("INT32", "flat_int32", "int32"),
    "DT_INT64": ("INT64", "flat_int64", "int64"),
    "DT_FLOAT16": ("FP16", "flat_float16", "float32"),
    "DT_FLOAT32": ("FP32", "flat_float32", "float32"),
    "DT_FLOAT64": ("FP64", "flat_float64", "float64"),
    "DT_STRING": ("BYTES", "flat_string", "object"),
}
BY_V2 = {v2: name for name, (v2, _, _) in DATATYPES.items()}
# V2 datatypes grps has no DataType for answer in the nearest one that holds every value
WIDENED = {"BOOL": "UINT8", "UINT16": "INT32", "UINT32": "INT64", "UINT64": "INT64", "BF16": "FP32"}

# gmap field -> the V2 datatype of its values
MAP_FIELDS = {
    "s_s": "BYTES",
    "s_b": "BYTES",
    "s_i32": "INT32",
    "s_i64": "INT64",
    "s_f": "FP32",
    "s_d": "FP64",
}
# output datatype -> the gmap field it answers in (BYTES: s_s if UTF-8 text, else s_b)
_MAP_ANSWER = {
    **dict.fromkeys(["BOOL", "UINT8", "UINT16", "INT8", "INT16", "INT32"], "s_i32"),
    **dict.fromkeys(["UINT32", "INT64"], "s_i64"),
    **dict.fromkeys(["FP16", "BF16", "FP32"], "s_f"),
    "FP64": "s_d",
    "BYTES": "s_s",
}

CONTENT_TYPE = "content_type"  # tensor parameter: "str" (text) or "bytes" for grps BYTES data


@dataclass(slots=True)
class Payload:
    """A decoded grps request: which data form it used, its model selector, its tensors.

    Tensor names may be empty (positional); ``bind`` gives them the model's input names.
    """

    form: str
    model: str
    tensors: list[Tensor]


# -- status ------------------------------------------------------------------------------------


def ok(**data: Any) -> Any:
    return pb.GrpsMessage(status=pb.Status(code=200, msg="OK", status=pb.Status.SUCCESS), **data)


def failure(code: int, msg: str) -> Any:
    return pb.GrpsMessage(status=pb.Status(code=code, msg=msg, status=pb.Status.FAILURE))


def error_message(exc: ServingError) -> Any:
    """A ServingError as the grps FAILURE reply, its code from the shared status table."""
    return failure(exc.http_status, exc.message)


# -- requests ----------------------------------------------------------------------------------


def payload_from_message(msg: Any, inline: bool = False) -> Payload:
    """``msg``'s data as tensors (``inline``: on the event loop, LargeWork for more values
    than are converted there one by one, core/codec.py)."""
    form = msg.WhichOneof("data_oneof")
    if form is None:
        raise InvalidInput(
            "the message carries no data: set one of bin_data, str_data, gtensors or gmap "
            "(REST JSON also takes ndarray)"
        )
    if form == "ndarray":
        raise InvalidInput(
            "ndarray carries data only in REST JSON (a nested array); over gRPC send gtensors"
        )
    return Payload(form, msg.model, _DECODERS[form](msg, inline))


def _scalar_text(msg: Any, inline: bool) -> list[Tensor]:
    return [_one_bytes("", msg.str_data.encode(), "str")]


def _scalar_bytes(msg: Any, inline: bool) -> list[Tensor]:
    return [_one_bytes("", msg.bin_data, "bytes")]


def _one_bytes(name: str, value: bytes, content_type: str) -> Tensor:
    data = np.empty(1, dtype=object)
    data[0] = value
    return Tensor(name, "BYTES", (1,), data, {CONTENT_TYPE: content_type})


def _generic_tensors(msg: Any, inline: bool) -> list[Tensor]:
    return [tensor_from_generic(gt, i, inline) for i, gt in enumerate(msg.gtensors.tensors)]


def tensor_from_generic(gt: Any, index: int, inline: bool = False) -> Tensor:
    label = gt.name or f"#{index}"
    dt_name = pb.DataType.Name(gt.dtype) if gt.dtype in pb.DataType.values() else str(gt.dtype)
    if dt_name not in DATATYPES:
        raise InvalidInput(
            f"tensor '{label}' has dtype {dt_name}; expected one of {', '.join(DATATYPES)}"
        )
    v2, field, carrier = DATATYPES[dt_name]
    dtype = dtypes.lookup(v2)
    shape = check_shape(list(gt.shape), label)
    values = getattr(gt, field)
    if len(values) != element_count(shape):
        raise InvalidInput(_count_mismatch(gt, dt_name, field, shape, label))
    if dtype.is_bytes:
        check_elements(len(values), label, inline)  # converted one by one
        data = bytes_array(list(values)).reshape(shape)
        return Tensor(gt.name, v2, shape, data, {CONTENT_TYPE: "str"})
    return Tensor(gt.name, v2, shape, from_values(values, np.dtype(carrier), dtype, shape, label))


def _count_mismatch(gt: Any, dt_name: str, field: str, shape: tuple[int, ...], label: str) -> str:
    text = (
        f"tensor '{label}' is {dt_name} with shape {list(shape)} ({element_count(shape)} "
        f"elements), so {field} must hold that many values, but it holds {len(getattr(gt, field))}"
    )
    others = [
        f"{f.name} ({len(value)} values)"
        for f, value in gt.ListFields()
        if f.name.startswith("flat_") and f.name != field
    ]
    if others:
        text += f"; the data sits in {', '.join(others)}, which {dt_name} does not use"
    return text


def _map_tensors(msg: Any, inline: bool) -> list[Tensor]:
    if inline and sum(len(getattr(msg.gmap, field)) for field in MAP_FIELDS) > INLINE_ELEMENTS:
        raise LargeWork  # a tensor made per entry
    tensors: dict[str, Tensor] = {}
    for field, v2 in MAP_FIELDS.items():
        for key, value in getattr(msg.gmap, field).items():
            if key in tensors:
                raise InvalidInput(f"gmap key '{key}' appears in more than one of the maps")
            if v2 == "BYTES":
                kind = "str" if field == "s_s" else "bytes"
                tensors[key] = _one_bytes(key, as_bytes(value), kind)
            else:
                data = np.array([value], dtype=dtypes.lookup(v2).numpy)
                tensors[key] = Tensor(key, v2, (1,), data)
    return list(tensors.values())


_DECODERS: dict[str, Callable[[Any, bool], list[Tensor]]] = {
    "str_data": _scalar_text,
    "bin_data": _scalar_bytes,
    "gtensors": _generic_tensors,
    "gmap": _map_tensors,
}


def bind(payload: Payload, model: str, inputs: list[TensorSpec]) -> list[Tensor]:
    """The payload's tensors named and shaped for a model's declared inputs."""
    single_bytes = len(inputs) == 1 and inputs[0].datatype == "BYTES"
    if payload.form in ("str_data", "bin_data") and not single_bytes:
        declared = [f"{s.name} ({s.datatype})" for s in inputs] or "no inputs"
        raise InvalidInput(
            f"{payload.form} feeds a model whose single input is BYTES; model '{model}' "
            f"declares {declared}: send gtensors or gmap"
        )
    tensors = payload.tensors
    unnamed = [t for t in tensors if not t.name]
    if unnamed:
        tensors = _positional(tensors, len(unnamed), model, inputs)
    if payload.form in ("str_data", "bin_data", "gmap"):
        specs = {s.name: s for s in inputs}
        tensors = [_one_element(t, specs.get(t.name)) for t in tensors]
    return tensors


def _positional(
    tensors: list[Tensor], unnamed: int, model: str, inputs: list[TensorSpec]
) -> list[Tensor]:
    if unnamed != len(tensors):
        raise InvalidInput("name every tensor, or none (unnamed tensors are matched by position)")
    if len(tensors) != len(inputs):
        names = [s.name for s in inputs]
        raise InvalidInput(
            f"{len(tensors)} unnamed tensor(s) sent, but model '{model}' declares "
            f"{len(inputs)} input(s) {names} to match them with by position; name the tensors"
        )
    return [
        Tensor(spec.name, t.datatype, t.shape, t.data, t.parameters)
        for t, spec in zip(tensors, inputs, strict=True)
    ]


def _one_element(tensor: Tensor, spec: TensorSpec | None) -> Tensor:
    """A single value shaped as the model declares it (-1 dims become 1), where that fits."""
    if spec is None:
        return tensor
    shape = tuple(1 if d == -1 else d for d in spec.shape)
    if element_count(shape) != 1:
        raise InvalidInput(
            f"input '{tensor.name}' has shape {list(spec.shape)}, which cannot hold the single "
            "value this form carries; send gtensors"
        )
    return Tensor(
        tensor.name, tensor.datatype, shape, tensor.data.reshape(shape), tensor.parameters
    )


# -- replies -----------------------------------------------------------------------------------


def to_message(response: InferenceResponse, form: str) -> Any:
    """The reply in the request's form where the outputs fit it, else in gtensors."""
    msg = ok(model=f"{response.model_name}-{response.model_version}")
    outputs = response.outputs
    if form in ("str_data", "bin_data") and _single_value(outputs, "BYTES"):
        value = as_bytes(outputs[0].data.reshape(-1)[0])
        text = _text(value) if form == "str_data" else None
        if text is None:
            msg.bin_data = value
        else:
            msg.str_data = text
    elif form == "gmap" and all(_single_value([t], None) for t in outputs):
        msg.gmap.SetInParent()
        for tensor in outputs:
            _put_in_map(msg.gmap, tensor)
    else:
        msg.gtensors.SetInParent()
        msg.gtensors.tensors.extend(generic_from_tensor(t) for t in outputs)
    return msg


def _single_value(outputs: list[Tensor], datatype: str | None) -> bool:
    if len(outputs) != 1 or outputs[0].data.size != 1:
        return False
    kind = outputs[0].datatype
    return kind == datatype if datatype else kind in _MAP_ANSWER


def _text(value: bytes) -> str | None:
    try:
        return value.decode()
    except UnicodeDecodeError:
        return None


def _put_in_map(gmap: Any, tensor: Tensor) -> None:
    """UTF-8 text answers in s_s, other bytes in s_b; numbers by their datatype."""
    value = tensor.data.reshape(-1)[0]
    field = _MAP_ANSWER[tensor.datatype]
    if field == "s_s":
        raw = as_bytes(value)
        text = _text(raw)
        if text is None:
            gmap.s_b[tensor.name] = raw
        else:
            gmap.s_s[tensor.name] = text
        return
    number = float(value) if field in ("s_f", "s_d") else int(value)
    getattr(gmap, field)[tensor.name] = number


def generic_from_tensor(tensor: Tensor) -> Any:
    v2 = WIDENED.get(tensor.datatype, tensor.datatype)
    dt_name = BY_V2[v2]
    _, field, carrier = DATATYPES[dt_name]
    gt = pb.GenericTensor(name=tensor.name, dtype=dt_name, shape=tensor.shape)
    flat = tensor.data.reshape(-1)
    if v2 == "BYTES":
        getattr(gt, field).extend(_texts(tensor.name, flat))
        return gt
    if tensor.datatype == "UINT64" and flat.size:
        check_range(0, int(flat.max()), dtypes.lookup("INT64"), tensor.name)
    getattr(gt, field).extend(flat.astype(carrier).tolist())
    return gt


def _texts(name: str, flat: Iterable[Any]) -> list[str]:
    texts = []
    for item in flat:
        text = _text(as_bytes(item))
        if text is None:
            raise InvalidInput(
                f"output '{name}' holds bytes that are not UTF-8 text, which DT_STRING cannot "
                "carry; a model with a single BYTES output answers them as bin_data"
            )
        texts.append(text)
    return texts
