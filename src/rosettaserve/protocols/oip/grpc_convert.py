"""Open Inference Protocol gRPC messages <-> core. Pure functions."""

from __future__ import annotations

from typing import Any

import numpy as np

from rosettaserve.core import dtypes
from rosettaserve.core.codec import (
    check_count,
    check_shape,
    element_count,
    from_raw,
    from_values,
    raw_bytes,
)
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from rosettaserve.protocols.oip.convert import request_context
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


def set_parameter(target: Any, value: Any) -> None:
    if isinstance(value, bool):
        target.bool_param = value
    elif isinstance(value, int):
        if value > 2**63 - 1:
            target.uint64_param = value
        else:
            target.int64_param = value
    elif isinstance(value, float):
        target.double_param = value
    else:
        target.string_param = str(value)


# Repeated fields are read by slicing, which builds the list at once: iterating one ends in an
# IndexError that protobuf formats a message for (~2,000 instructions per container).


def parse_infer(msg: Any) -> InferenceRequest:
    raw = msg.raw_input_contents[:]
    tensors = msg.inputs[:]
    if raw and any(t.HasField("contents") for t in tensors):
        raise InvalidInput(
            "contents field must not be specified when using raw_input_contents: "
            "send every input raw, or every input in typed contents"
        )
    if raw and len(raw) != len(tensors):
        raise InvalidInput(
            f"raw_input_contents holds {len(raw)} buffers for {len(tensors)} inputs; "
            "send one buffer per input, in input order"
        )
    inputs = [_parse_input(t, raw[i] if raw else None) for i, t in enumerate(tensors)]
    outputs = [RequestedOutput(o.name, parameters_from(o.parameters)) for o in msg.outputs[:]]
    parameters = parameters_from(msg.parameters)
    return InferenceRequest(
        model_name=msg.model_name,
        model_version=msg.model_version,
        id=msg.id,
        inputs=inputs,
        outputs=outputs or None,
        parameters=parameters,
        context=request_context(parameters, "oip_grpc"),
    )


def _parse_input(t: Any, raw: bytes | None) -> Tensor:
    name = t.name  # read once: each read of a protobuf field builds a new str
    dtype = dtypes.lookup(t.datatype, name)
    shape = check_shape(t.shape[:], name)
    params = parameters_from(t.parameters)
    data = _from_contents(t, dtype, shape) if raw is None else from_raw(raw, dtype, shape, name)
    return Tensor(name, dtype.name, shape, data, params)


def _from_contents(t: Any, dtype: dtypes.DType, shape: tuple[int, ...]) -> np.ndarray:
    field = CONTENTS_FIELD.get(dtype.name)
    if field is None:
        raise InvalidInput(f"{dtype.name} input '{t.name}' must be sent in raw_input_contents")
    values = getattr(t.contents, field)[:]
    if dtype.is_bytes:
        check_count(len(values), element_count(shape), shape, t.name)
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out.reshape(shape)
    return from_values(values, np.dtype(_WIDE[field]), dtype, shape, t.name)


_WIDE = {
    "bool_contents": "bool",
    "int_contents": "int32",
    "int64_contents": "int64",
    "uint_contents": "uint32",
    "uint64_contents": "uint64",
    "fp32_contents": "float32",
    "fp64_contents": "float64",
}


def encode_infer(response: InferenceResponse) -> Any:
    """Outputs go in raw_output_contents, aligned with `outputs` (tritonclient reads only that)."""
    outputs, raw = [], []
    for tensor in response.outputs:
        out = pb.ModelInferResponse.InferOutputTensor(
            name=tensor.name, datatype=tensor.datatype, shape=tensor.shape
        )
        if tensor.parameters:
            for key, value in tensor.parameters.items():
                set_parameter(out.parameters[key], value)
        outputs.append(out)
        raw.append(raw_bytes(tensor.data, dtypes.lookup(tensor.datatype)))
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
