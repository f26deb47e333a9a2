"""A catalogue of bad grps requests against a real server, over REST and (where the request
can be said as a GrpsMessage) over gRPC. Each must answer a FAILURE with the expected code, the
HTTP status equal to it, the same code and message on both transports, and the server must go
on serving afterwards."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from rosettaserve.protocols.grps.pb import grps_pb2 as pb
from tests.integration.grps_support import TIMEOUT_S, message, raw_post
from tests.serverproc import ServerProcess

JSON = "application/json"


@dataclass(frozen=True)
class Case:
    id: str
    body: Any  # a dict (sent as JSON and, if grpc, as a GrpsMessage) or raw bytes
    code: int
    texts: tuple[str, ...]
    query: str = ""
    content_type: str = JSON
    grpc: bool = False  # the same request also goes over gRPC


def tensor(dtype: Any = "DT_FLOAT32", shape: Any = (1, 4), **data: Any) -> dict[str, Any]:
    doc = {"name": "INPUT0", "dtype": dtype, "shape": list(shape)}
    return doc | (data or {"flat_float32": [1.0, 2.0, 3.0, 4.0]})


def gtensors(model: str, *tensors: dict[str, Any]) -> dict[str, Any]:
    return {"model": model, "gtensors": {"tensors": list(tensors)}}


CASES = [
    Case("malformed-json", b'{"str_data": ', 400, ("not valid JSON",)),
    Case("json-array", b'["str_data"]', 400, ("must be a JSON object",)),
    Case("empty-body", b"", 400, ("the request body is empty",)),
    Case("text-plain", b"hi", 400, ("Content-Type 'text/plain'",), content_type="text/plain"),
    Case("bin-data-in-json", {"bin_data": "aGk="}, 400, ("bin_data cannot travel in JSON",)),
    Case(
        "unknown-enum-name",
        gtensors("mlp_onnx", tensor("DT_FLOAT128")),
        400,
        ("unknown dtype 'DT_FLOAT128'", "DT_FLOAT32"),
    ),
    Case(
        "unknown-enum-number",
        gtensors("mlp_onnx", tensor(42)),
        400,
        ("has dtype 42", "DT_FLOAT32"),
        grpc=True,
    ),
    Case(
        "wrong-field-for-dtype",
        gtensors("mlp_onnx", tensor(flat_int32=[1, 2, 3, 4])),
        400,
        ("flat_float32 must hold that many values, but it holds 0", "flat_int32 (4 values)"),
        grpc=True,
    ),
    Case(
        "shape-data-mismatch",
        gtensors("mlp_onnx", tensor(shape=(2, 4))),
        400,
        ("shape [2, 4] (8 elements)", "holds 4"),
        grpc=True,
    ),
    Case(
        "huge-shape-no-data",
        gtensors("mlp_onnx", tensor(shape=(100000, 100000))),
        400,
        ("10000000000 elements",),
        grpc=True,
    ),
    Case(
        "too-many-dims",
        gtensors("identity_fp32", tensor(shape=[1] * 65, flat_float32=[1.0])),
        400,
        ("65 dims",),
        grpc=True,
    ),
    Case("negative-dim", gtensors("mlp_onnx", tensor(shape=(-1, 4))), 400, ("out of range",)),
    Case(
        "out-of-range-uint8",
        gtensors("identity_uint8", tensor("DT_UINT8", (1, 2), flat_uint8=[1, 256])),
        400,
        ("outside the UINT8 range",),
        grpc=True,
    ),
    Case(
        "dtype-the-model-does-not-take",
        gtensors("identity_fp32", tensor("DT_INT32", (1, 2), flat_int32=[1, 2])),
        400,
        ("has datatype INT32", "expects FP32"),
        grpc=True,
    ),
    Case(
        "return-ndarray-with-streaming",
        {"ndarray": [[1.0]]},
        400,
        ("streaming and return-ndarray",),
        query="?streaming=true&return-ndarray=true",
    ),
    Case(
        "return-ndarray-of-text",
        {"str_data": "x"},
        400,
        ("return-ndarray needs a single FP32 output",),
        query="?return-ndarray=true",
    ),
    Case("ragged-ndarray", {"ndarray": [[1, 2], [3]]}, 400, ("ragged",)),
    Case("ndarray-of-strings", {"ndarray": ["a"]}, 400, ("must hold JSON numbers",)),
    Case("two-data-fields", {"str_data": "a", "gmap": {}}, 400, ("data_oneof",)),
    Case("no-data", {"model": "mlp_onnx", "s_t": {}}, 400, ("carries no data",), grpc=True),
    Case("bad-base64", {"gmap": {"s_b": {"k": "@@"}}}, 400, ("not base64",)),
    Case(
        "str-data-to-a-tensor-model",
        {"model": "mlp_onnx", "str_data": "x"},
        400,
        ("single input is BYTES", "INPUT0 (FP32)"),
        grpc=True,
    ),
    Case(
        "gmap-missing-an-input",
        {"model": "grps_map_echo", "gmap": {"s_s": {"text": "x"}}},
        400,
        ("is missing", "are missing"),
        grpc=True,
    ),
    Case(
        "unknown-model",
        {"model": "no_such_model-3", "str_data": "x"},
        404,
        ("unknown model 'no_such_model-3'",),
        grpc=True,
    ),
    Case(
        "unknown-version",
        {"model": "versioned_python-9", "ndarray": [[1.0]]},
        404,
        ("no version 9",),
    ),
    Case(
        "model-value-error",
        {"model": "grps_faulty", "str_data": "bad"},
        400,
        ("the text 'bad' is refused",),
        grpc=True,
    ),
    Case(
        "model-crash",
        {"model": "grps_faulty", "str_data": "crash"},
        500,
        ("RuntimeError: the model crashed on purpose",),
        grpc=True,
    ),
]


def still_serving(server: ServerProcess, stub: Any) -> None:
    response = raw_post(server.http_url, "/grps/v1/infer/predict", b'{"str_data":"ok"}', JSON)
    assert json.loads(response.body)["str_data"] == "hello, ok!"
    assert stub.Predict(pb.GrpsMessage(str_data="ok"), timeout=TIMEOUT_S).str_data == "hello, ok!"


def expect_failure(status: dict[str, Any], case: Case) -> None:
    assert (status["code"], status["status"]) == (case.code, "FAILURE"), status
    assert any(text in status["msg"] for text in case.texts), status["msg"]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_requests_fail_cleanly_on_both_transports(
    grps_server: ServerProcess, stub: Any, case: Case
) -> None:
    body = case.body if isinstance(case.body, bytes) else json.dumps(case.body).encode()
    path = "/grps/v1/infer/predict" + case.query
    response = raw_post(grps_server.http_url, path, body, case.content_type)
    assert response.status == case.code
    doc = json.loads(response.body)
    assert set(doc) == {"status"}
    expect_failure(doc["status"], case)
    if case.grpc:
        reply, call = stub.Predict.with_call(message(case.body), timeout=TIMEOUT_S)
        assert call.code() is grpc.StatusCode.OK
        assert (reply.status.code, reply.status.msg) == (case.code, doc["status"]["msg"])
        assert reply.status.status == pb.Status.FAILURE
    still_serving(grps_server, stub)


def test_every_case_names_texts_that_really_occur() -> None:
    """A guard on the catalogue itself: 'any of texts' must not be vacuous."""
    assert all(case.texts and all(case.texts) for case in CASES)
