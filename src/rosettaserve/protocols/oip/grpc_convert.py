"""Open Inference Protocol gRPC messages <-> core. Pure functions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rosettaserve.core import dtypes
from rosettaserve.core.codec import (
    check_count,
    check_elements,
    check_shape,
    element_count,
    from_raw,
    from_values,
    raw_bytes,
)
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.types import (
    InferenceRequest,
    InferenceResponse,
    Parameters,
    RequestedOutput,
    Tensor,
)
from rosettaserve.protocols.oip import requested, shared_memory
from rosettaserve.protocols.oip.convert import asks_extensions, request_context
from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb

# V2 datatype -> the InferTensorContents field that carries it (FP16/BF16 travel raw only)
CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def parameter_value(param: Any) -> Any:
    """An InferParameter's value (fields 1-5: bool, int64, string, double, uint64)."""
    choice = param.WhichOneof("parameter_choice")
    return None if choice is None else getattr(param, choice)


def parameters_from(params: Any) -> dict[str, Any]:
    if not params:  # the usual case; a map's len() costs less than its items() view
        return {}
    return {key: parameter_value(value) for key, value in params.items()}


def parameter_choice(value: Any) -> tuple[str, Any]:
    """The InferParameter field a value travels in, and what that field holds."""
    if isinstance(value, bool):
        return "bool_param", value
    if isinstance(value, int):
        return ("uint64_param" if value > 2**63 - 1 else "int64_param"), value
    if isinstance(value, float):
        return "double_param", value
    return "string_param", str(value)


def set_parameter(target: Any, value: Any) -> None:
    field, held = parameter_choice(value)
    setattr(target, field, held)


# Repeated fields are read by slicing, which builds the list at once: iterating one ends in an
# IndexError that protobuf formats a message for [cost: pb-repeated].


def parse_infer(msg: Any, inline: bool = False) -> InferenceRequest:
    """A ModelInferRequest message as core's request (grpc_wire reads the same from bytes;
    ``inline``: on the event loop, LargeWork for a BYTES tensor too large to decode there)."""
    inputs = [
        InputFields(
            t.name,
            t.datatype,
            t.shape[:],
            parameters_from(t.parameters),
            _contents_values(t.contents, t.name) if t.HasField("contents") else None,
        )
        for t in msg.inputs[:]
    ]
    outputs = [RequestedOutput(o.name, parameters_from(o.parameters)) for o in msg.outputs[:]]
    return build_request(
        inputs,
        msg.raw_input_contents[:],
        model_name=msg.model_name,
        model_version=msg.model_version,
        request_id=msg.id,
        parameters=parameters_from(msg.parameters),
        outputs=outputs,
        inline=inline,
    )


@dataclass(init=False, slots=True)
class InputFields:
    """An InferInputTensor's fields as read off the wire or a message. ``contents``: None
    when absent, else InferTensorContents as {field name: its values} (fields set only)."""

    name: str
    datatype: str
    shape: list[int]
    parameters: Parameters
    contents: dict[str, Any] | None

    def __init__(
        self,
        name: str,
        datatype: str,
        shape: list[int],
        parameters: Parameters,
        contents: dict[str, Any] | None,
    ) -> None:
        self.name = name
        self.datatype = datatype
        self.shape = shape
        self.parameters = parameters
        self.contents = contents


def build_request(
    inputs: list[InputFields],
    raw: list[Any],
    *,
    model_name: str,
    model_version: str,
    request_id: str,
    parameters: Parameters,
    outputs: list[RequestedOutput],
    inline: bool = False,
) -> InferenceRequest:
    """The checks and conversions of a ModelInferRequest, wherever its fields were read from."""
    if raw and any(t.contents is not None for t in inputs):
        raise InvalidInput(
            "contents field must not be specified when using raw_input_contents: "
            "send every input raw, or every input in typed contents"
        )
    regions = (  # (most requests: no input has parameters, nothing to look up)
        [shared_memory.input_bytes(t.parameters, t.name) for t in inputs]
        if any(t.parameters for t in inputs)
        else None
    )
    if regions is not None and any(region is not None for region in regions):
        tensors = _with_regions(inputs, regions, raw, model_name, inline)
    else:
        if raw and len(raw) != len(inputs):
            raise InvalidInput(
                f"raw_input_contents holds {len(raw)} buffers for {len(inputs)} inputs; "
                "send one buffer per input, in input order"
            )
        tensors = [_parse_input(t, raw[i] if raw else None, inline) for i, t in enumerate(inputs)]
    request = InferenceRequest(
        model_name=model_name,
        model_version=model_version,
        id=request_id,
        inputs=tensors,
        outputs=outputs or None,
        parameters=parameters,
        context=request_context(parameters, "oip_grpc"),
    )
    if asks_extensions(request.outputs):
        requested.note(request)
    return request


def _with_regions(
    inputs: list[InputFields], regions: list[Any], raw: list[Any], model: str, inline: bool
) -> list[Tensor]:
    """Inputs some of which are in shared memory: raw_input_contents holds a buffer for each
    of the others, in input order (what tritonclient sends)."""
    unplaced = len(inputs) - sum(region is not None for region in regions)
    if raw and len(raw) != unplaced:
        raise InvalidInput(
            f"raw_input_contents holds {len(raw)} buffers for {unplaced} inputs not in shared "
            "memory; send one buffer per such input, in input order"
        )
    tensors, at = [], 0
    for t, region in zip(inputs, regions, strict=True):
        if region is None:
            tensors.append(_parse_input(t, raw[at] if raw else None, inline))
            at += 1 if raw else 0
            continue
        if t.contents is not None:
            raise InvalidInput(
                "unexpected 'content' provided when using shared memory for input tensor "
                f"'{t.name}' for model '{model}'"
            )
        tensors.append(_parse_input(t, region, inline))
    return tensors


def _parse_input(t: InputFields, raw: Any, inline: bool) -> Tensor:
    name = t.name
    dtype = dtypes.lookup(t.datatype, name)
    shape = check_shape(t.shape, name)
    if raw is None:
        data = _from_contents(t, dtype, shape)
    else:
        data = from_raw(raw, dtype, shape, name, inline)
    return Tensor(name, dtype.name, shape, data, t.parameters)


def _from_contents(t: InputFields, dtype: dtypes.DType, shape: tuple[int, ...]) -> np.ndarray:
    field = CONTENTS_FIELD.get(dtype.name)
    if field is None:
        raise InvalidInput(f"{dtype.name} input '{t.name}' must be sent in raw_input_contents")
    values: Any = [] if t.contents is None else t.contents.get(field, [])
    if dtype.is_bytes:
        check_count(len(values), element_count(shape), shape, t.name)
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out.reshape(shape)
    return from_values(values, _WIDE[field], dtype, shape, t.name)


def _contents_values(contents: Any, name: str) -> dict[str, Any]:
    """An InferTensorContents message's set fields, as ``InputFields.contents`` holds them
    (bytes values bounded before they are copied out: codec.check_elements)."""
    found: dict[str, Any] = {}
    for descriptor, values in contents.ListFields():
        if descriptor.name == "bytes_contents":
            check_elements(len(values), name, False)  # (protobuf's copy: C, not one by one)
        found[descriptor.name] = values[:]
    return found


_WIDE = {  # each contents field's values as numpy holds them
    field: np.dtype(kind)
    for field, kind in (
        ("bool_contents", "bool"),
        ("int_contents", "int32"),
        ("int64_contents", "int64"),
        ("uint_contents", "uint32"),
        ("uint64_contents", "uint64"),
        ("fp32_contents", "float32"),
        ("fp64_contents", "float64"),
    )
}


def encode_infer(response: InferenceResponse, inline: bool = False) -> Any:
    """Outputs go in raw_output_contents, aligned with `outputs` (tritonclient reads only that;
    ``inline``: LargeWork for a BYTES output too large to encode on the event loop)."""
    outputs, raw = [], []
    for tensor in response.outputs:
        out = pb.ModelInferResponse.InferOutputTensor(
            name=tensor.name, datatype=tensor.datatype, shape=tensor.shape
        )
        if tensor.parameters:
            for key, value in tensor.parameters.items():
                set_parameter(out.parameters[key], value)
        outputs.append(out)
        raw.append(raw_bytes(tensor.data, dtypes.lookup(tensor.datatype), inline))
    msg = pb.ModelInferResponse(
        model_name=response.model_name,
        model_version=response.model_version,
        id=response.id or "",
        outputs=outputs,
        raw_output_contents=raw,
    )
    for key, value in response.parameters.items():
        set_parameter(msg.parameters[key], value)
    return msg
