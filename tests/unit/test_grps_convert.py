"""grps GrpsMessage <-> core tensors: every DataType, gmap, binding to a model, reply forms."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from rosettaserve.core.errors import InvalidInput, ModelNotFound
from rosettaserve.core.types import InferenceResponse, Tensor, TensorSpec
from rosettaserve.protocols.grps import convert
from rosettaserve.protocols.grps.pb import grps_pb2 as pb

NUMERIC = {
    "DT_UINT8": ("UINT8", "flat_uint8", [0, 1, 2, 127, 200, 255]),
    "DT_INT8": ("INT8", "flat_int8", [-128, -1, 0, 1, 2, 127]),
    "DT_INT16": ("INT16", "flat_int16", [-32768, -1, 0, 1, 2, 32767]),
    "DT_INT32": ("INT32", "flat_int32", [-(2**31), -1, 0, 1, 2, 2**31 - 1]),
    "DT_INT64": ("INT64", "flat_int64", [-(2**63), -1, 0, 1, 2**53 + 1, 2**63 - 1]),
    "DT_FLOAT16": ("FP16", "flat_float16", [-2.5, -1.0, 0.0, 0.5, 1.5, 65504.0]),
    "DT_FLOAT32": ("FP32", "flat_float32", [-2.5, -1.0, 0.0, 0.5, 1.5, 3.25]),
    "DT_FLOAT64": ("FP64", "flat_float64", [-2.5, -1.0, 0.0, 0.1, 1.5, 1e300]),
}


def generic(dtype: str, shape: list[int], field: str, values: list[Any], name: str = "t") -> Any:
    gt = pb.GenericTensor(name=name, dtype=dtype, shape=shape)
    getattr(gt, field).extend(values)
    return gt


def response(*outputs: Tensor) -> InferenceResponse:
    return InferenceResponse(model_name="m", model_version="3", outputs=list(outputs))


def bytes_tensor(name: str, *items: bytes) -> Tensor:
    data = np.empty(len(items), dtype=object)
    data[:] = list(items)
    return Tensor(name, "BYTES", (len(items),), data)


# -- GenericTensor <-> Tensor ------------------------------------------------------------------


@pytest.mark.parametrize("dt_name", sorted(NUMERIC))
def test_every_numeric_datatype_round_trips(dt_name: str) -> None:
    v2, field, values = NUMERIC[dt_name]
    tensor = convert.tensor_from_generic(generic(dt_name, [2, 3], field, values), 0)
    assert (tensor.name, tensor.datatype, tensor.shape) == ("t", v2, (2, 3))
    assert tensor.data.dtype == np.dtype(v2.lower().replace("fp", "float"))
    assert tensor.data.reshape(-1).tolist() == pytest.approx(values)
    back = convert.generic_from_tensor(tensor)
    assert pb.DataType.Name(back.dtype) == dt_name
    assert list(back.shape) == [2, 3]
    assert list(getattr(back, field)) == pytest.approx(values)
    assert [f.name for f, _ in back.ListFields() if f.name.startswith("flat_")] == [field]


def test_strings_round_trip_as_utf8_bytes() -> None:
    gt = generic("DT_STRING", [3], "flat_string", ["héllo", "", "grps"])
    tensor = convert.tensor_from_generic(gt, 0)
    assert tensor.datatype == "BYTES"
    assert tensor.data.tolist() == ["héllo".encode(), b"", b"grps"]
    assert tensor.parameters == {convert.CONTENT_TYPE: "str"}
    assert list(convert.generic_from_tensor(tensor).flat_string) == ["héllo", "", "grps"]


@pytest.mark.parametrize(
    ("dt_name", "field", "value", "v2"),
    [
        ("DT_UINT8", "flat_uint8", 256, "UINT8"),
        ("DT_INT8", "flat_int8", 128, "INT8"),
        ("DT_INT8", "flat_int8", -129, "INT8"),
        ("DT_INT16", "flat_int16", 40000, "INT16"),
    ],
)
def test_values_outside_the_datatype_range_are_refused(
    dt_name: str, field: str, value: int, v2: str
) -> None:
    with pytest.raises(InvalidInput, match=f"outside the {v2} range"):
        convert.tensor_from_generic(generic(dt_name, [2], field, [1, value]), 0)


def test_data_in_the_wrong_field_is_named() -> None:
    gt = generic("DT_FLOAT32", [1, 4], "flat_int32", [1, 2, 3, 4], name="")
    with pytest.raises(InvalidInput) as caught:
        convert.tensor_from_generic(gt, 2)
    message = caught.value.message
    assert "tensor '#2' is DT_FLOAT32" in message
    assert "flat_float32 must hold that many values, but it holds 0" in message
    assert "flat_int32 (4 values)" in message


@pytest.mark.parametrize(("shape", "count"), [([2, 3], 5), ([2, 3], 7), ([], 2), ([0], 1)])
def test_shape_and_data_must_agree(shape: list[int], count: int) -> None:
    gt = generic("DT_INT32", shape, "flat_int32", list(range(count)))
    with pytest.raises(InvalidInput, match=f"holds {count}"):
        convert.tensor_from_generic(gt, 0)


@pytest.mark.parametrize("dtype", [0, 42])
def test_invalid_or_unknown_dtype_numbers_are_refused(dtype: int) -> None:
    gt = pb.GenericTensor(name="x", dtype=dtype, shape=[1], flat_int32=[1])
    with pytest.raises(InvalidInput, match=r"tensor 'x' has dtype .*expected one of DT_UINT8"):
        convert.tensor_from_generic(gt, 0)


@pytest.mark.parametrize(
    ("datatype", "values", "dt_name", "field"),
    [
        ("BOOL", [True, False], "DT_UINT8", "flat_uint8"),
        ("UINT16", [0, 65535], "DT_INT32", "flat_int32"),
        ("UINT32", [0, 2**32 - 1], "DT_INT64", "flat_int64"),
        ("UINT64", [0, 2**63 - 1], "DT_INT64", "flat_int64"),
        ("BF16", [1.5, -2.0], "DT_FLOAT32", "flat_float32"),
    ],
)
def test_datatypes_without_a_grps_type_answer_widened(
    datatype: str, values: list[object], dt_name: str, field: str
) -> None:
    numpy_type = ml_dtypes.bfloat16 if datatype == "BF16" else datatype.lower()
    data = np.array(values, dtype=numpy_type)
    gt = convert.generic_from_tensor(Tensor("o", datatype, (2,), data))
    assert pb.DataType.Name(gt.dtype) == dt_name
    assert list(getattr(gt, field)) == [float(v) if datatype == "BF16" else int(v) for v in values]


def test_uint64_beyond_int64_cannot_answer() -> None:
    tensor = Tensor("o", "UINT64", (1,), np.array([2**64 - 1], dtype=np.uint64))
    with pytest.raises(InvalidInput, match="outside the INT64 range"):
        convert.generic_from_tensor(tensor)


def test_bytes_that_are_not_text_cannot_be_dt_string() -> None:
    with pytest.raises(InvalidInput, match=r"not UTF-8 text.*bin_data"):
        convert.generic_from_tensor(bytes_tensor("o", b"ok", b"\xff\xfe"))


# -- messages -> payloads ----------------------------------------------------------------------


def test_str_and_bin_data_become_one_unnamed_bytes_element() -> None:
    text = convert.payload_from_message(pb.GrpsMessage(str_data="hé", model="m-1"))
    raw = convert.payload_from_message(pb.GrpsMessage(bin_data=b"\x00\xff"))
    assert (text.form, text.model, raw.form, raw.model) == ("str_data", "m-1", "bin_data", "")
    assert text.tensors[0].data.tolist() == ["hé".encode()]
    assert raw.tensors[0].data.tolist() == [b"\x00\xff"]
    assert text.tensors[0].parameters == {convert.CONTENT_TYPE: "str"}
    assert raw.tensors[0].parameters == {convert.CONTENT_TYPE: "bytes"}


def test_an_empty_string_is_still_data() -> None:
    payload = convert.payload_from_message(pb.GrpsMessage(str_data=""))
    assert payload.tensors[0].data.tolist() == [b""]


def test_gmap_entries_become_typed_one_element_tensors() -> None:
    msg = pb.GrpsMessage()
    msg.gmap.s_s["a"] = "text"
    msg.gmap.s_b["b"] = b"\x00\x01"
    msg.gmap.s_i32["c"] = -7
    msg.gmap.s_i64["d"] = 2**40
    msg.gmap.s_f["e"] = 0.5
    msg.gmap.s_d["f"] = 0.1
    tensors = {t.name: t for t in convert.payload_from_message(msg).tensors}
    got = {k: (t.datatype, t.shape, t.data.tolist()) for k, t in tensors.items()}
    assert got == {
        "a": ("BYTES", (1,), [b"text"]),
        "b": ("BYTES", (1,), [b"\x00\x01"]),
        "c": ("INT32", (1,), [-7]),
        "d": ("INT64", (1,), [2**40]),
        "e": ("FP32", (1,), [0.5]),
        "f": ("FP64", (1,), [0.1]),
    }
    assert tensors["a"].parameters[convert.CONTENT_TYPE] == "str"
    assert tensors["b"].parameters[convert.CONTENT_TYPE] == "bytes"


def test_a_gmap_key_in_two_maps_is_refused() -> None:
    msg = pb.GrpsMessage()
    msg.gmap.s_s["k"] = "x"
    msg.gmap.s_i32["k"] = 1
    with pytest.raises(InvalidInput, match="gmap key 'k'"):
        convert.payload_from_message(msg)


def test_a_message_without_data_or_with_grpc_ndarray_is_refused() -> None:
    with pytest.raises(InvalidInput, match="carries no data"):
        convert.payload_from_message(pb.GrpsMessage(model="m"))
    msg = pb.GrpsMessage()
    msg.ndarray.SetInParent()
    with pytest.raises(InvalidInput, match="ndarray carries data only in REST JSON"):
        convert.payload_from_message(msg)


# -- binding to a model's inputs ---------------------------------------------------------------

ONE_BYTES = [TensorSpec("TEXT", "BYTES", (-1, 1))]


def test_str_data_takes_the_single_bytes_input_and_its_shape() -> None:
    payload = convert.payload_from_message(pb.GrpsMessage(str_data="hi"))
    (tensor,) = convert.bind(payload, "m", ONE_BYTES)
    assert (tensor.name, tensor.shape, tensor.data.tolist()) == ("TEXT", (1, 1), [[b"hi"]])


@pytest.mark.parametrize(
    "inputs",
    [
        [],
        [TensorSpec("X", "FP32", (1,))],
        [TensorSpec("A", "BYTES", (1,)), TensorSpec("B", "BYTES", (1,))],
    ],
)
def test_str_data_needs_a_single_bytes_input(inputs: list[TensorSpec]) -> None:
    payload = convert.payload_from_message(pb.GrpsMessage(bin_data=b"x"))
    with pytest.raises(InvalidInput, match="bin_data feeds a model whose single input is BYTES"):
        convert.bind(payload, "m", inputs)


def test_a_single_value_cannot_fill_a_wider_input() -> None:
    payload = convert.payload_from_message(pb.GrpsMessage(str_data="hi"))
    with pytest.raises(InvalidInput, match=r"shape \[2\], which cannot hold the single value"):
        convert.bind(payload, "m", [TensorSpec("TEXT", "BYTES", (2,))])


def test_unnamed_tensors_take_the_inputs_in_order() -> None:
    msg = pb.GrpsMessage()
    msg.gtensors.tensors.extend(
        [
            generic("DT_INT32", [2], "flat_int32", [1, 2], name=""),
            generic("DT_FLOAT32", [1], "flat_float32", [0.5], name=""),
        ]
    )
    specs = [TensorSpec("A", "INT32", (-1,)), TensorSpec("B", "FP32", (-1,))]
    bound = convert.bind(convert.payload_from_message(msg), "m", specs)
    assert [(t.name, t.datatype, t.shape) for t in bound] == [
        ("A", "INT32", (2,)),
        ("B", "FP32", (1,)),
    ]
    with pytest.raises(InvalidInput, match=r"2 unnamed tensor\(s\) sent.*declares 1 input"):
        convert.bind(convert.payload_from_message(msg), "m", specs[:1])


def test_named_and_unnamed_tensors_cannot_mix() -> None:
    msg = pb.GrpsMessage()
    msg.gtensors.tensors.extend(
        [
            generic("DT_INT32", [1], "flat_int32", [1], name="A"),
            generic("DT_INT32", [1], "flat_int32", [2], name=""),
        ]
    )
    with pytest.raises(InvalidInput, match="name every tensor, or none"):
        convert.bind(convert.payload_from_message(msg), "m", [])


def test_named_tensors_keep_their_names_and_shapes() -> None:
    msg = pb.GrpsMessage()
    msg.gtensors.tensors.append(generic("DT_INT32", [1, 2], "flat_int32", [1, 2], name="Z"))
    (tensor,) = convert.bind(convert.payload_from_message(msg), "m", [])
    assert (tensor.name, tensor.shape) == ("Z", (1, 2))


# -- replies -----------------------------------------------------------------------------------


def test_a_single_bytes_output_answers_in_the_request_form() -> None:
    text = convert.to_message(response(bytes_tensor("O", "hé".encode())), "str_data")
    raw = convert.to_message(response(bytes_tensor("O", b"abc")), "bin_data")
    assert (text.WhichOneof("data_oneof"), text.str_data) == ("str_data", "hé")
    assert (raw.WhichOneof("data_oneof"), raw.bin_data) == ("bin_data", b"abc")
    assert (text.status.code, text.status.msg, text.status.status) == (200, "OK", pb.Status.SUCCESS)
    assert text.model == "m-3"


def test_bytes_that_are_not_text_answer_a_str_request_as_bin_data() -> None:
    msg = convert.to_message(response(bytes_tensor("O", b"\xff\x00")), "str_data")
    assert (msg.WhichOneof("data_oneof"), msg.bin_data) == ("bin_data", b"\xff\x00")


@pytest.mark.parametrize(
    "outputs",
    [
        [Tensor("O", "INT32", (1,), np.array([1], dtype=np.int32))],
        [bytes_tensor("O", b"a", b"b")],
        [bytes_tensor("O", b"a"), bytes_tensor("P", b"b")],
    ],
)
def test_outputs_that_do_not_fit_str_data_answer_in_gtensors(outputs: list[Tensor]) -> None:
    msg = convert.to_message(response(*outputs), "str_data")
    assert msg.WhichOneof("data_oneof") == "gtensors"
    assert [t.name for t in msg.gtensors.tensors] == [t.name for t in outputs]


def test_gmap_answers_by_datatype() -> None:
    outputs = [
        bytes_tensor("s", b"text"),
        bytes_tensor("b", b"\xff"),
        Tensor("i", "INT16", (1,), np.array([-3], dtype=np.int16)),
        Tensor("l", "INT64", (1, 1), np.array([[2**50]], dtype=np.int64)),
        Tensor("f", "FP32", (1,), np.array([0.25], dtype=np.float32)),
        Tensor("d", "FP64", (), np.array(0.1)),
    ]
    gmap = convert.to_message(response(*outputs), "gmap").gmap
    assert dict(gmap.s_s) == {"s": "text"}
    assert dict(gmap.s_b) == {"b": b"\xff"}
    assert dict(gmap.s_i32) == {"i": -3}
    assert dict(gmap.s_i64) == {"l": 2**50}
    assert dict(gmap.s_f) == {"f": 0.25}
    assert dict(gmap.s_d) == {"d": 0.1}


def test_gmap_with_a_multi_element_output_answers_in_gtensors() -> None:
    outputs = [Tensor("i", "INT32", (2,), np.array([1, 2], dtype=np.int32))]
    assert convert.to_message(response(*outputs), "gmap").WhichOneof("data_oneof") == "gtensors"


def test_no_outputs_still_answer_an_explicit_empty_gtensors() -> None:
    assert convert.to_message(response(), "gtensors").WhichOneof("data_oneof") == "gtensors"


def test_failures_take_code_and_message_from_the_error() -> None:
    msg = convert.error_message(ModelNotFound("unknown model 'x'"))
    assert (msg.status.code, msg.status.msg) == (404, "unknown model 'x'")
    assert msg.status.status == pb.Status.FAILURE
    assert msg.WhichOneof("data_oneof") is None
