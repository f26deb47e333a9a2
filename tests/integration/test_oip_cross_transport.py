"""The same bad requests over REST and gRPC get the same meaning: one status table, one message."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx
import pytest

from rosettaserve.core.status import BY_HTTP
from rosettaserve.protocols.oip.grpc_convert import CONTENTS_FIELD
from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from tests.integration.gated import model_infer
from tests.serverproc import ServerProcess


@dataclass
class Case:
    name: str
    model: str
    inputs: list[dict[str, Any]]
    status: int
    message: str
    version: str = ""
    outputs: list[str] | None = None
    parameters: dict[str, Any] = field(default_factory=dict)


def fp32(shape: list[int], data: list[float], name: str = "INPUT0") -> dict[str, Any]:
    return {"name": name, "datatype": "FP32", "shape": shape, "data": data}


GOOD = [fp32([1, 4], [1, 2, 3, 4])]
CASES = [
    Case("unknown_model", "no_such_model", GOOD, 404, "unknown model 'no_such_model'"),
    Case("unknown_version", "mlp_onnx", GOOD, 404, "has no version 7", version="7"),
    Case(
        "datatype_mismatch",
        "mlp_onnx",
        [{"name": "INPUT0", "datatype": "FP64", "shape": [1, 4], "data": [1, 2, 3, 4]}],
        400,
        "expects FP32",
    ),
    Case("wrong_shape", "mlp_onnx", [fp32([2, 2], [1, 2, 3, 4])], 400, "has shape [2, 2]"),
    Case(
        "unknown_datatype",
        "mlp_onnx",
        [{"name": "INPUT0", "datatype": "FLOAT", "shape": [1, 4], "data": [1, 2, 3, 4]}],
        400,
        "unknown datatype 'FLOAT'",
    ),
    Case("negative_dim", "mlp_onnx", [fp32([-1, 4], [1, 2, 3, 4])], 400, "negative dimension"),
    Case("count_mismatch", "mlp_onnx", [fp32([1, 4], [1, 2, 3])], 400, "(4 elements)"),
    Case("unknown_input", "mlp_onnx", [*GOOD, fp32([1], [1], "EXTRA")], 400, "'EXTRA'"),
    Case("missing_input", "mlp_onnx", [], 400, "missing"),
    Case("unknown_output", "mlp_onnx", GOOD, 400, "unexpected output 'NOPE'", outputs=["NOPE"]),
    Case(
        "duplicate_output",
        "mlp_onnx",
        GOOD,
        400,
        "requested more than once",
        outputs=["OUTPUT0", "OUTPUT0"],
    ),
    Case(
        "model_value_error",
        "params_async",
        [{"name": "INPUT0", "datatype": "INT32", "shape": [1], "data": [1]}],
        400,
        "asked for a ValueError",
        parameters={"fail": "value"},
    ),
    Case(
        "model_crash",
        "params_async",
        [{"name": "INPUT0", "datatype": "INT32", "shape": [1], "data": [1]}],
        500,
        "RuntimeError: parameter 'fail' asked for a crash",
        parameters={"fail": "crash"},
    ),
    Case(
        "streaming_model_unary",
        "stream_python",
        [{"name": "INPUT0", "datatype": "INT32", "shape": [2], "data": [1, 2]}],
        400,
        "streams its responses",
    ),
    Case(
        "int_out_of_range",
        "identity_int8",
        [{"name": "INPUT0", "datatype": "INT8", "shape": [1, 1], "data": [300]}],
        400,
        "outside the INT8 range",
    ),
]


def rest_body(case: Case) -> dict[str, Any]:
    body: dict[str, Any] = {"inputs": case.inputs}
    if case.outputs is not None:
        body["outputs"] = [{"name": n} for n in case.outputs]
    if case.parameters:
        body["parameters"] = case.parameters
    return body


def grpc_request(case: Case) -> Any:
    msg = pb.ModelInferRequest(model_name=case.model, model_version=case.version)
    for spec in case.inputs:
        tensor = msg.inputs.add(name=spec["name"], datatype=spec["datatype"], shape=spec["shape"])
        field_name = CONTENTS_FIELD.get(spec["datatype"], "fp32_contents")
        getattr(tensor.contents, field_name).extend(spec["data"])
    for name in case.outputs or []:
        msg.outputs.add(name=name)
    for key, value in case.parameters.items():
        msg.parameters[key].string_param = value
    return msg


@pytest.fixture(scope="module")
def infer_stub(server: ServerProcess) -> Iterator[Any]:
    with grpc.insecure_channel(server.grpc_address) as channel:
        yield model_infer(channel)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_same_error_same_meaning_on_rest_and_grpc(
    server: ServerProcess, infer_stub: Any, case: Case
) -> None:
    path = f"/v2/models/{case.model}" + (f"/versions/{case.version}" if case.version else "")
    rest = httpx.post(server.http_url + path + "/infer", json=rest_body(case), timeout=30)
    assert rest.status_code == case.status, rest.text
    assert case.message in rest.json()["error"]

    with pytest.raises(grpc.RpcError) as caught:
        infer_stub(grpc_request(case), timeout=30)
    expected = grpc.StatusCode[BY_HTTP[case.status].value.grpc_name]
    assert caught.value.code() == expected
    assert caught.value.details() == rest.json()["error"]

    assert httpx.get(server.http_url + "/v2/health/live").status_code == 200


def test_grpc_only_rules(server: ServerProcess, infer_stub: Any) -> None:
    """Checks that have no REST twin: raw and typed contents at once, raw count, raw size."""
    both = pb.ModelInferRequest(model_name="mlp_onnx", raw_input_contents=[b"\0" * 16])
    both.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 4]).contents.fp32_contents.extend(
        [1, 2, 3, 4]
    )
    short = pb.ModelInferRequest(model_name="mlp_onnx", raw_input_contents=[b"\0" * 15])
    short.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 4])
    extra = pb.ModelInferRequest(model_name="mlp_onnx", raw_input_contents=[b"\0" * 16] * 2)
    extra.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 4])
    fp16 = pb.ModelInferRequest(model_name="identity_fp16")
    fp16.inputs.add(name="INPUT0", datatype="FP16", shape=[1, 1])
    expectations = [
        (both, "must not be specified when using raw_input_contents"),
        (short, "needs 16 bytes, but 15 were sent"),
        (extra, "holds 2 buffers for 1 inputs"),
        (fp16, "must be sent in raw_input_contents"),
    ]
    for request, message in expectations:
        with pytest.raises(grpc.RpcError) as caught:
            infer_stub(request, timeout=30)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in caught.value.details()
