"""TensorProto <-> numpy (protocols/tfserving/tensorproto.py) on hand-built protos: TensorFlow's
reading rules (tensor_content, typed fields, one value filling the shape) and TF Serving's
answers (tensor_content; string_val for strings)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from rosettaserve.core.errors import InvalidInput
from rosettaserve.protocols.tfserving import messages as tfpb
from rosettaserve.protocols.tfserving import tensorproto


def proto(dtype: int, dims: list[int], **fields: Any) -> Any:
    made = tfpb.TensorProto(dtype=dtype, **fields)
    made.tensor_shape.dim.extend(tfpb.TensorShapeProto.Dim(size=d) for d in dims)
    return made


@pytest.mark.parametrize(
    ("dtype", "numpy_type", "datatype"),
    [
        (tfpb.DT_FLOAT, np.float32, "FP32"),
        (tfpb.DT_DOUBLE, np.float64, "FP64"),
        (tfpb.DT_INT8, np.int8, "INT8"),
        (tfpb.DT_INT16, np.int16, "INT16"),
        (tfpb.DT_INT32, np.int32, "INT32"),
        (tfpb.DT_INT64, np.int64, "INT64"),
        (tfpb.DT_UINT8, np.uint8, "UINT8"),
        (tfpb.DT_UINT16, np.uint16, "UINT16"),
        (tfpb.DT_UINT32, np.uint32, "UINT32"),
        (tfpb.DT_UINT64, np.uint64, "UINT64"),
        (tfpb.DT_HALF, np.float16, "FP16"),
        (tfpb.DT_BFLOAT16, ml_dtypes.bfloat16, "BF16"),
        (tfpb.DT_BOOL, np.bool_, "BOOL"),
    ],
)
def test_tensor_content_both_ways(dtype: int, numpy_type: Any, datatype: str) -> None:
    array = np.arange(6).reshape(2, 3).astype(numpy_type)
    sent = proto(
        dtype, [2, 3], tensor_content=array.astype(array.dtype.newbyteorder("<")).tobytes()
    )
    got_type, got = tensorproto.to_array(sent, "x")
    assert got_type == datatype
    assert got.dtype == array.dtype
    assert got.tolist() == array.tolist()
    answer = tensorproto.make(got, datatype)
    assert answer.dtype == dtype
    assert [d.size for d in answer.tensor_shape.dim] == [2, 3]
    assert answer.tensor_content == sent.tensor_content


def test_typed_fields() -> None:
    assert tensorproto.to_array(proto(tfpb.DT_FLOAT, [2], float_val=[1.5, -2]), "x")[
        1
    ].tolist() == [
        1.5,
        -2.0,
    ]
    ints = tensorproto.to_array(proto(tfpb.DT_INT8, [3], int_val=[-128, 127, 300]), "x")[1]
    assert ints.dtype == np.int8
    assert ints.tolist() == [-128, 127, 44]  # narrowed as TensorFlow casts: wrapping
    halves = tensorproto.to_array(proto(tfpb.DT_HALF, [2], half_val=[0x3C00, 0xC000]), "x")[1]
    assert halves.dtype == np.float16
    assert halves.tolist() == [1.0, -2.0]
    bf16 = tensorproto.to_array(proto(tfpb.DT_BFLOAT16, [1], half_val=[0x3FC0]), "x")[1]
    assert bf16.dtype == ml_dtypes.bfloat16
    assert bf16.tolist() == [1.5]
    big = tensorproto.to_array(proto(tfpb.DT_UINT64, [1], uint64_val=[2**64 - 1]), "x")[1]
    assert big.tolist() == [2**64 - 1]
    flags = tensorproto.to_array(proto(tfpb.DT_BOOL, [2], bool_val=[True, False]), "x")[1]
    assert flags.tolist() == [True, False]


def test_fewer_values_repeat_the_last_and_none_are_zeros() -> None:
    one = tensorproto.to_array(proto(tfpb.DT_FLOAT, [2, 2], float_val=[5.0]), "x")[1]
    assert one.tolist() == [[5.0, 5.0], [5.0, 5.0]]
    some = tensorproto.to_array(proto(tfpb.DT_INT64, [4], int64_val=[1, 2]), "x")[1]
    assert some.tolist() == [1, 2, 2, 2]
    none = tensorproto.to_array(proto(tfpb.DT_INT32, [2]), "x")[1]
    assert none.dtype == np.int32
    assert none.tolist() == [0, 0]
    words = tensorproto.to_array(proto(tfpb.DT_STRING, [3], string_val=[b"a", b"b"]), "x")[1]
    assert words.tolist() == [b"a", b"b", b"b"]
    empty = tensorproto.to_array(proto(tfpb.DT_STRING, [2]), "x")[1]
    assert empty.tolist() == [b"", b""]
    scalar = tensorproto.to_array(proto(tfpb.DT_DOUBLE, [], double_val=[0.5]), "x")[1]
    assert scalar.shape == ()
    assert float(scalar) == 0.5


def test_strings_answer_in_string_val() -> None:
    array = np.array([[b"a", b"\x00\xff"]], dtype=object)
    answer = tensorproto.make(array, "BYTES")
    assert answer.dtype == tfpb.DT_STRING
    assert list(answer.string_val) == [b"a", b"\x00\xff"]
    assert not answer.tensor_content
    assert tensorproto.to_array(answer, "x")[1].tolist() == array.tolist()


def test_nonzero_content_bytes_are_true() -> None:
    flags = tensorproto.to_array(proto(tfpb.DT_BOOL, [3], tensor_content=b"\x00\x01\x02"), "x")
    assert flags[1].tolist() == [False, True, True]


@pytest.mark.parametrize(
    "bad",
    [
        proto(tfpb.DT_FLOAT, [2], tensor_content=b"\x00" * 7),  # not 2 floats
        proto(tfpb.DT_FLOAT, [1], float_val=[1.0, 2.0]),  # more values than elements
        proto(tfpb.DT_FLOAT, [-1], float_val=[1.0]),  # a signature's unknown dim
        proto(tfpb.DT_RESOURCE, [1]),  # no dtype a model takes
        proto(tfpb.DT_INVALID, [1]),
        proto(tfpb.DT_FLOAT, [1 << 25], float_val=[1.0]),  # a fill past the bound
        proto(tfpb.DT_FLOAT, [1 << 40, 1 << 40, 0]),  # a size numpy cannot count
        tfpb.TensorProto(
            dtype=tfpb.DT_FLOAT, tensor_shape=tfpb.TensorShapeProto(unknown_rank=True)
        ),
    ],
)
def test_what_tensorflow_cannot_read_is_a_parse_error(bad: Any) -> None:
    with pytest.raises(InvalidInput, match=r"^tensor parsing error: x$"):
        tensorproto.to_array(bad, "x")


def test_typed_count() -> None:
    assert tensorproto.typed_count(proto(tfpb.DT_FLOAT, [3], float_val=[1, 2, 3])) == 3
    assert tensorproto.typed_count(proto(tfpb.DT_FLOAT, [1], tensor_content=b"\x00" * 4)) == 0
    assert tensorproto.typed_count(proto(tfpb.DT_RESOURCE, [1])) == 0
