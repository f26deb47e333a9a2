"""grps.proto against the documented field numbers, and the served rpc table against the proto."""

from __future__ import annotations

from typing import Any

import pytest

from rosettaserve.protocols.grps import grpc as grps_grpc
from rosettaserve.protocols.grps.pb import grps_pb2 as pb

# message -> {field: (number, type name or message/enum full name, repeated)}
FIELDS: dict[str, dict[str, tuple[int, str, bool]]] = {
    "GrpsMessage": {
        "status": (1, "grps.protos.v1.Status", False),
        "model": (2, "string", False),
        "bin_data": (3, "bytes", False),
        "str_data": (4, "string", False),
        "gtensors": (5, "grps.protos.v1.GenericTensorData", False),
        "ndarray": (6, "grps.protos.v1.NDArrayData", False),
        "gmap": (7, "grps.protos.v1.GenericMapData", False),
    },
    "Status": {
        "code": (1, "int32", False),
        "msg": (2, "string", False),
        "status": (3, "grps.protos.v1.Status.StatusFlag", False),
    },
    "GenericTensor": {
        "name": (1, "string", False),
        "dtype": (2, "grps.protos.v1.DataType", False),
        "shape": (3, "uint32", True),
        "flat_uint8": (4, "uint32", True),
        "flat_int8": (5, "int32", True),
        "flat_int16": (6, "int32", True),
        "flat_int32": (7, "int32", True),
        "flat_int64": (8, "int64", True),
        "flat_float16": (9, "float", True),
        "flat_float32": (10, "float", True),
        "flat_float64": (11, "double", True),
        "flat_string": (12, "string", True),
    },
    "GenericTensorData": {"tensors": (1, "grps.protos.v1.GenericTensor", True)},
    "NDArrayData": {},
}
MAPS = {"s_s": (1, "string"), "s_b": (2, "bytes"), "s_i32": (3, "int32")}
MAPS |= {"s_i64": (4, "int64"), "s_f": (5, "float"), "s_d": (6, "double")}
TYPE_NAMES = {9: "string", 12: "bytes", 5: "int32", 13: "uint32", 3: "int64", 2: "float"}
TYPE_NAMES |= {1: "double"}
DATA_TYPES = ["DT_INVALID", "DT_UINT8", "DT_INT8", "DT_INT16", "DT_INT32", "DT_INT64"]
DATA_TYPES += ["DT_FLOAT16", "DT_FLOAT32", "DT_FLOAT64", "DT_STRING"]
RPC_ORDER = ["Predict", "PredictStreaming", "Online", "Offline", "CheckLiveness"]
RPC_ORDER += ["CheckReadiness", "ServerMetadata", "ModelMetadata"]


def describe(field: Any) -> tuple[int, str, bool]:
    if field.message_type is not None:
        kind = field.message_type.full_name
    elif field.enum_type is not None:
        kind = field.enum_type.full_name
    else:
        kind = TYPE_NAMES[field.type]
    return field.number, kind, field.is_repeated


@pytest.mark.parametrize("message", sorted(FIELDS))
def test_field_numbers_and_types_are_grps(message: str) -> None:
    descriptor = pb.DESCRIPTOR.message_types_by_name[message]
    assert descriptor.full_name == f"grps.protos.v1.{message}"
    assert {f.name: describe(f) for f in descriptor.fields} == FIELDS[message]


def test_the_data_fields_form_one_oneof() -> None:
    oneof = pb.GrpsMessage.DESCRIPTOR.oneofs_by_name["data_oneof"]
    assert [f.name for f in oneof.fields] == ["bin_data", "str_data", "gtensors", "ndarray", "gmap"]


def test_generic_map_data_maps_strings_to_each_value_type() -> None:
    fields = pb.GenericMapData.DESCRIPTOR.fields
    got = {}
    for f in fields:
        entry = f.message_type
        assert entry.GetOptions().map_entry
        key, value = entry.fields_by_name["key"], entry.fields_by_name["value"]
        assert TYPE_NAMES[key.type] == "string"
        got[f.name] = (f.number, TYPE_NAMES[value.type])
    assert got == MAPS


def test_enum_numbers() -> None:
    assert [pb.DataType.Name(i) for i in range(len(DATA_TYPES))] == DATA_TYPES
    assert [pb.Status.StatusFlag.Name(i) for i in range(3)] == ["UNKNOWN", "SUCCESS", "FAILURE"]


def test_the_served_rpcs_are_the_proto_service() -> None:
    service = pb.DESCRIPTOR.services_by_name["GrpsService"]
    assert service.full_name == grps_grpc.SERVICE == "grps.protos.v1.GrpsService"
    assert [m.name for m in service.methods] == RPC_ORDER
    assert sorted(grps_grpc.RPCS) == sorted(RPC_ORDER)
    for method in service.methods:
        request, response, streaming = grps_grpc.RPCS[method.name]
        assert request.DESCRIPTOR is method.input_type
        assert response.DESCRIPTOR is method.output_type
        assert not method.client_streaming
        assert (streaming == "server") is method.server_streaming
        assert callable(getattr(grps_grpc.GrpsServicer, method.name))
