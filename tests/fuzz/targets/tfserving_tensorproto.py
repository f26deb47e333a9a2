"""TF Serving gRPC's TensorProto reader (``protocols/tfserving/tensorproto.py``): a message
parsed from the bytes, then read as an array the way Predict reads its inputs.

Properties: only the project's errors (4xx) escape reading; an array read has the shape the
proto names; written back as TF Serving answers (``tensor_content`` or ``string_val``) it reads
back to the same values, bit for bit.
"""

from __future__ import annotations

import numpy as np
from google.protobuf.message import DecodeError

from rosettaserve.protocols.tfserving import messages as tfpb
from rosettaserve.protocols.tfserving import tensorproto
from tests.fuzz.targets.refusals import assert_a_refusal


def check(data: bytes) -> None:
    try:
        proto = tfpb.TensorProto.FromString(data)
    except DecodeError:
        return
    try:
        datatype, array = tensorproto.to_array(proto, "x")
    except Exception as exc:
        assert_a_refusal(exc)
        return
    assert array.shape == tensorproto.shape_of(proto), (array.shape, proto.tensor_shape)
    again = tensorproto.make(array, datatype)
    assert again.tensor_content or datatype == "BYTES" or array.size == 0
    back_type, back = tensorproto.to_array(
        tfpb.TensorProto.FromString(again.SerializeToString()), "x"
    )
    assert back_type == datatype
    if datatype == "BYTES":
        assert back.shape == array.shape
        assert back.reshape(-1).tolist() == array.reshape(-1).tolist()
    else:
        assert np.ascontiguousarray(back).tobytes() == np.ascontiguousarray(array).tobytes()
