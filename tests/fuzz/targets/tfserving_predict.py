"""TF Serving's Predict request reader (``protocols/tfserving/predict_wire.py``) fed arbitrary
bytes.

Properties: only the project's errors (4xx) escape ``request`` (the reader, with protobuf
behind it); where the reader reads a request itself, it means what protobuf's own parse of
PredictRequest means (``from_message``): the same target, signature name and output filter, and
each input read to the same array or refused alike.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.message import DecodeError

from rosettaserve.core.types import TensorSpec
from rosettaserve.protocols.tfserving import grpc_convert as conv
from rosettaserve.protocols.tfserving import messages, predict_wire, tensorproto
from rosettaserve.protocols.tfserving.signatures import Signature
from tests.fuzz.targets.refusals import assert_a_refusal


def check(data: bytes) -> None:
    try:
        predict_wire.request(data)
    except Exception as exc:
        assert_a_refusal(exc)
    wire = by_wire(data)
    if wire != "protobuf's":
        assert wire == by_protobuf(data), (wire, by_protobuf(data))


def by_wire(data: bytes) -> Any:
    try:
        read = predict_wire.read(data)
    except Exception as exc:
        assert_a_refusal(exc)
        return ("refused", str(exc))
    return "protobuf's" if read is None else meaning(read)


def by_protobuf(data: bytes) -> Any:
    try:
        return meaning(predict_wire.from_message(messages.PredictRequest.FromString(data)))
    except DecodeError:
        return "not a message"
    except Exception as exc:
        assert_a_refusal(exc)
        return ("refused", str(exc))


def meaning(call: predict_wire.Predict) -> Any:
    inputs = {}
    for alias in sorted(call.inputs):
        one = Signature("s", "predict", {alias: _spec(call.inputs[alias])}, {})
        try:
            array = conv.predict_inputs(predict_wire.Predict(call.target, "", call.inputs, []), one)
            inputs[alias] = (array[alias].dtype.str, array[alias].shape, array[alias].tobytes())
        except Exception as exc:
            assert_a_refusal(exc)
            inputs[alias] = ("refused", str(exc))
    return (call.target, call.signature_name, call.output_filter, inputs)


def _spec(tensor: Any) -> TensorSpec:
    """A signature input of the datatype the tensor names (so its values are what is compared)."""
    return TensorSpec("x", tensorproto.FROM_DT.get(tensor.dtype, "FP32"), ())
