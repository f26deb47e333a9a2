"""grps over gRPC against a real server, driven by GrpsServiceStub generated from our proto:
every data form both ways, selection, PredictStreaming, metadata; the transport status is OK."""

from __future__ import annotations

from typing import Any

import grpc
import httpx
import pytest
import yaml

from rosettaserve.protocols.grps.pb import grps_pb2 as pb
from tests.integration.grps_support import DEFAULT_MODEL, TIMEOUT_S, as_dict, message
from tests.serverproc import ServerProcess

SUCCESS = pb.Status(code=200, msg="OK", status=pb.Status.SUCCESS)


def ok(reply: Any) -> Any:
    assert reply.status == SUCCESS, reply.status
    return reply


def failed(reply: Any, code: int, *texts: str) -> None:
    assert (reply.status.code, reply.status.status) == (code, pb.Status.FAILURE), reply.status
    for text in texts:
        assert text in reply.status.msg
    assert reply.WhichOneof("data_oneof") is None


def test_str_data_both_ways(stub: Any) -> None:
    reply = ok(stub.Predict(pb.GrpsMessage(str_data="grpc"), timeout=TIMEOUT_S))
    assert (reply.str_data, reply.model) == ("hello, grpc!", f"{DEFAULT_MODEL}-1")


def test_bin_data_both_ways(stub: Any) -> None:
    raw = bytes(range(256))
    reply = ok(stub.Predict(pb.GrpsMessage(bin_data=raw), timeout=TIMEOUT_S))
    assert (reply.WhichOneof("data_oneof"), reply.bin_data) == ("bin_data", b"hello, " + raw + b"!")


def test_a_bytes_model_takes_dt_string_and_bin_data(stub: Any) -> None:
    request = pb.GrpsMessage(model="identity_bytes")
    request.gtensors.tensors.add(name="INPUT0", dtype=pb.DT_STRING, shape=[1, 1], flat_string=["é"])
    assert ok(stub.Predict(request, timeout=TIMEOUT_S)).gtensors.tensors[0].flat_string == ["é"]
    reply = ok(stub.Predict(pb.GrpsMessage(bin_data=b"\xff", model="identity_bytes")))
    assert reply.bin_data == b"\xff"


TENSORS: list[tuple[str, str, str, list[Any]]] = [
    ("uint8", "DT_UINT8", "flat_uint8", [0, 1, 2, 3, 254, 255]),
    ("int8", "DT_INT8", "flat_int8", [-128, -1, 0, 1, 2, 127]),
    ("int16", "DT_INT16", "flat_int16", [-32768, -1, 0, 1, 2, 32767]),
    ("int32", "DT_INT32", "flat_int32", [-(2**31), -1, 0, 1, 2, 2**31 - 1]),
    ("int64", "DT_INT64", "flat_int64", [-(2**63), -1, 0, 1, 2**53 + 1, 2**63 - 1]),
    ("fp16", "DT_FLOAT16", "flat_float16", [-2.5, -1.0, 0.0, 0.5, 1.5, 65504.0]),
    ("fp32", "DT_FLOAT32", "flat_float32", [-2.5, -1.0, 0.0, 0.5, 1.5, 3.25]),
    ("fp64", "DT_FLOAT64", "flat_float64", [-2.5, -1.0, 0.0, 0.1, 1.5, 1e300]),
    ("bytes", "DT_STRING", "flat_string", ["a", "", "ü", "grps", "x y", "6"]),
]


@pytest.mark.parametrize(
    ("model", "dtype", "field", "values"), TENSORS, ids=[t[1] for t in TENSORS]
)
def test_gtensors_of_every_dtype_round_trip(
    stub: Any, model: str, dtype: str, field: str, values: list[Any]
) -> None:
    request = pb.GrpsMessage(model=f"identity_{model}")
    request.gtensors.tensors.append(
        pb.GenericTensor(name="INPUT0", dtype=dtype, shape=[2, 3], **{field: values})
    )
    (out,) = ok(stub.Predict(request, timeout=TIMEOUT_S)).gtensors.tensors
    assert (out.name, pb.DataType.Name(out.dtype), list(out.shape)) == ("OUTPUT0", dtype, [2, 3])
    assert list(getattr(out, field)) == values


def test_fp16_beyond_its_range_is_a_400_naming_the_tensor(stub: Any) -> None:
    """flat_float16 is a protobuf float: 70000 fits it, not FP16 (no silent infinity)."""
    request = pb.GrpsMessage(model="identity_fp16")
    request.gtensors.tensors.add(
        name="INPUT0", dtype=pb.DT_FLOAT16, shape=[1, 3], flat_float16=[1.0, 70000.0, 2.0]
    )
    failed(stub.Predict(request, timeout=TIMEOUT_S), 400, "tensor 'INPUT0' holds 70000", "FP16")
    request.gtensors.tensors[0].flat_float16[1] = float("inf")  # sent as such: kept
    (out,) = ok(stub.Predict(request, timeout=TIMEOUT_S)).gtensors.tensors
    assert list(out.flat_float16) == [1.0, float("inf"), 2.0]


def test_gmap_of_every_map_round_trips(stub: Any) -> None:
    request = pb.GrpsMessage(model="grps_map_echo")
    request.gmap.s_s["text"] = "héllo"
    request.gmap.s_b["blob"] = b"\xff\x00binary"
    request.gmap.s_i32["count"] = -3
    request.gmap.s_i64["big"] = 2**62 + 1
    request.gmap.s_f["ratio"] = 0.25
    request.gmap.s_d["precise"] = 0.1
    reply = ok(stub.Predict(request, timeout=TIMEOUT_S))
    assert reply.gmap == request.gmap


@pytest.mark.parametrize(
    ("model", "answered_by"),
    [
        ("", f"{DEFAULT_MODEL}-1"),
        ("grps_faulty", "grps_faulty-1"),
        ("grps_faulty-1", "grps_faulty-1"),
    ],
)
def test_the_message_model_or_the_default(stub: Any, model: str, answered_by: str) -> None:
    reply = ok(stub.Predict(pb.GrpsMessage(str_data="x", model=model), timeout=TIMEOUT_S))
    assert reply.model == answered_by


def test_an_unknown_model_is_a_404_in_the_body_with_transport_ok(stub: Any) -> None:
    reply, call = stub.Predict.with_call(pb.GrpsMessage(str_data="x", model="no_such_model"))
    assert call.code() is grpc.StatusCode.OK
    failed(reply, 404, "no_such_model")


def test_model_errors_are_500_and_value_errors_400(stub: Any) -> None:
    crash = stub.Predict(pb.GrpsMessage(str_data="crash", model="grps_faulty"))
    failed(crash, 500, "RuntimeError: the model crashed on purpose")
    bad = stub.Predict(pb.GrpsMessage(str_data="bad", model="grps_faulty"))
    failed(bad, 400, "the text 'bad' is refused")


def test_predict_streaming_yields_each_message(stub: Any) -> None:
    request = pb.GrpsMessage(str_data="the quick brown fox", model="words_stream_python")
    replies = [ok(r) for r in stub.PredictStreaming(request, timeout=TIMEOUT_S)]
    assert [r.str_data for r in replies] == ["the", "quick", "brown", "fox"]


def test_an_error_mid_stream_ends_it_with_a_failure(stub: Any) -> None:
    request = pb.GrpsMessage(str_data="fail-midway", model="grps_faulty_stream")
    call = stub.PredictStreaming(request, timeout=TIMEOUT_S)
    replies = list(call)
    assert call.code() is grpc.StatusCode.OK
    assert [ok(r).str_data for r in replies[:2]] == ["part 1", "part 2"]
    assert len(replies) == 3
    failed(replies[2], 500, "failed after two parts")


@pytest.mark.parametrize(
    ("text", "model", "code", "why"),
    [
        ("fail-first", "grps_faulty_stream", 500, "failed before the first part"),
        ("x", "no_such_model", 404, "no_such_model"),
        ("abc", "grps_faulty_stream", 400, "invalid literal for int()"),
    ],
)
def test_a_stream_that_fails_at_once_is_one_failure(
    stub: Any, text: str, model: str, code: int, why: str
) -> None:
    replies = list(stub.PredictStreaming(pb.GrpsMessage(str_data=text, model=model)))
    assert len(replies) == 1
    failed(replies[0], code, why)


def test_a_model_that_does_not_stream_streams_one_message(stub: Any) -> None:
    replies = list(stub.PredictStreaming(pb.GrpsMessage(str_data="once"), timeout=TIMEOUT_S))
    assert [ok(r).str_data for r in replies] == ["hello, once!"]


def test_unary_predict_on_a_streaming_model_says_it_streams(stub: Any) -> None:
    reply = stub.Predict(pb.GrpsMessage(str_data="a b", model="words_stream_python"))
    failed(reply, 400, "streams its responses")


def test_server_and_model_metadata_are_yaml(stub: Any) -> None:
    server = yaml.safe_load(ok(stub.ServerMetadata(pb.GrpsMessage())).str_data)
    assert server["grps"]["default_model"] == DEFAULT_MODEL
    assert "grps_map_echo-1" in {m["model"] for m in server["models"]}
    model = yaml.safe_load(
        ok(stub.ModelMetadata(pb.GrpsMessage(str_data="grps_map_echo"))).str_data
    )
    assert [i["name"] for i in model["inputs"]] == [
        "text",
        "blob",
        "count",
        "big",
        "ratio",
        "precise",
    ]
    failed(stub.ModelMetadata(pb.GrpsMessage(str_data="nope")), 404, "unknown model 'nope'")


def test_rest_and_grpc_give_the_same_answer_for_the_same_message(
    stub: Any, grps_server: ServerProcess
) -> None:
    doc = {
        "model": "identity_int16",
        "gtensors": {
            "tensors": [
                {"name": "INPUT0", "dtype": "DT_INT16", "shape": [1, 2], "flat_int16": [3, -4]}
            ]
        },
    }
    rest = httpx.post(grps_server.http_url + "/grps/v1/infer/predict", json=doc, timeout=TIMEOUT_S)
    grpc_reply = stub.Predict(message(doc), timeout=TIMEOUT_S)
    assert rest.json() == as_dict(grpc_reply)
