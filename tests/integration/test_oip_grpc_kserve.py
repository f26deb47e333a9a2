"""The real server's gRPC endpoint driven by kserve's official ``InferenceGRPCClient`` (grpc.aio).

The client is async; each test runs it with ``asyncio.run`` on a fresh client. kserve sends
``binary_data=True`` inputs as ``raw_input_contents`` (still tagged with the REST-only
``binary_data_size`` parameter) and ``binary_data=False`` inputs as typed ``contents``
(``fp32_contents``, ``bytes_contents``, ...), so both of the server's input decoders are
exercised. Expected values are computed independently: onnxruntime on the repository's ONNX file,
joblib on the repository's copy of the pickle.

What kserve's gRPC client cannot do (covered by tests_tritongrpc/, with Triton's gRPC client):
metadata, config, statistics, repository and streaming rpcs, float/uint64 parameters, BF16, and
FP16 as typed contents. Triton's gRPC client cannot share a process with kserve (their protobuf
descriptors clash), which is why those tests live in their own directory.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import numpy as np
import onnxruntime as ort
import pytest
from kserve import InferenceGRPCClient, InferInput, InferRequest, InferResponse
from kserve.protocol.infer_type import RequestedOutput

from tests import v2data
from tests.integration.kserve_support import kinput, value
from tests.serverproc import ServerProcess
from tests.v2data import DATATYPES, as_bytes_list, assert_same, rng_for

# kserve has no BF16; FP16 cannot travel as typed contents (the protocol has no field for it)
BINARY_DTYPES = [d for d in DATATYPES if d != "BF16"]
CONTENTS_DTYPES = [d for d in BINARY_DTYPES if d != "FP16"]
MODES = [pytest.param(True, id="raw"), pytest.param(False, id="contents")]
T = TypeVar("T")


# -- helpers (local to this module) ------------------------------------------------------------


def run(server: ServerProcess, fn: Callable[[InferenceGRPCClient], Awaitable[T]]) -> T:
    """Run ``fn(client)`` on a fresh event loop with a fresh client (no retries)."""

    async def main() -> T:
        client = InferenceGRPCClient(server.grpc_address, timeout=60, retries=0)
        try:
            return await fn(client)
        finally:
            await client.close()

    return asyncio.run(main())


def infer(server: ServerProcess, request: InferRequest) -> InferResponse:
    return run(server, lambda c: c.infer(request))


def expect_error(
    server: ServerProcess,
    fn: Callable[[InferenceGRPCClient], Awaitable[Any]],
    code: Any,
    *frags: str,
) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        run(server, fn)
    exc = info.value
    assert exc.code() == code, (exc.code(), exc.details())
    for fragment in frags:
        assert fragment in (exc.details() or ""), exc.details()
    return exc


def request(model: str, inputs: list[InferInput], **kwargs: Any) -> InferRequest:
    return InferRequest(model_name=model, infer_inputs=inputs, **kwargs)


def assert_wire_encoding(req: InferRequest, binary: bool) -> None:
    """The request kserve builds really is raw (or really is typed contents)."""
    msg = req.to_grpc()
    if binary:
        assert len(msg.raw_input_contents) == len(msg.inputs)
        assert not any(t.HasField("contents") for t in msg.inputs)
    else:
        assert len(msg.raw_input_contents) == 0
        assert all(t.HasField("contents") for t in msg.inputs)


def output_names(response: InferResponse) -> list[str]:
    return [o.name for o in response.outputs]


def sample(dtype: str, binary: bool) -> np.ndarray:
    """kserve's typed-contents path needs UTF-8 BYTES; floats are raw either way."""
    return v2data.sample(dtype, "kserve-grpc", non_utf8=binary)


def assert_still_serving(server: ServerProcess) -> None:
    async def check(c: InferenceGRPCClient) -> None:
        assert await c.is_server_live() is True
        assert await c.is_server_ready() is True
        x = np.array([[3.0, -1.0]], dtype=np.float32)
        req = request("versioned_python", [kinput("INPUT0", x, "FP32", True)], model_version="1")
        response = await c.infer(req)
        np.testing.assert_array_equal(value(response, "OUTPUT0"), x)

    run(server, check)


def params_of(response: InferResponse) -> dict[str, Any]:
    (raw,) = value(response, "PARAMS").ravel()
    doc: dict[str, Any] = json.loads(raw)
    return doc


# -- health --------------------------------------------------------------------------------------


def test_server_live_and_ready(server: ServerProcess) -> None:
    async def check(c: InferenceGRPCClient) -> tuple[bool, bool]:
        return await c.is_server_live(), await c.is_server_ready()

    assert run(server, check) == (True, True)


def test_model_ready(server: ServerProcess) -> None:
    async def check(c: InferenceGRPCClient) -> list[bool]:
        names = ["mlp_onnx", "iris_sklearn", "text_python", "versioned_python", "stream_python"]
        return [await c.is_model_ready(n) for n in names]

    assert run(server, check) == [True] * 5
    expect_error(
        server,
        lambda c: c.is_model_ready("no_such_model"),
        grpc.StatusCode.NOT_FOUND,
        "no_such_model",
    )
    assert_still_serving(server)


# -- inference -----------------------------------------------------------------------------------


@pytest.mark.parametrize("binary", MODES)
def test_infer_mlp_onnx(
    server: ServerProcess, mlp_session: ort.InferenceSession, binary: bool
) -> None:
    x = rng_for(f"mlp{binary}").standard_normal((6, 4)).astype(np.float32)
    (expected,) = mlp_session.run(None, {"INPUT0": x})
    req = request("mlp_onnx", [kinput("INPUT0", x, "FP32", binary)], request_id="mlp-1")
    assert_wire_encoding(req, binary)
    response = infer(server, req)
    assert response.model_name == "mlp_onnx"
    assert response.model_version == "1"
    assert response.id == "mlp-1"
    assert output_names(response) == ["OUTPUT0"]
    got = value(response, "OUTPUT0")
    assert got.dtype == np.float32
    assert got.shape == (6, 3)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("binary", MODES)
def test_infer_iris_sklearn(server: ServerProcess, iris: Any, binary: bool) -> None:
    x = np.array(
        [[5.0, 3.4, 1.5, 0.2], [6.4, 3.2, 5.3, 2.3], [5.7, 2.8, 4.1, 1.3]], dtype=np.float64
    )
    req = request("iris_sklearn", [kinput("input", x, "FP64", binary)])
    assert_wire_encoding(req, binary)
    response = infer(server, req)
    assert output_names(response) == ["predict", "predict_proba"]
    assert as_bytes_list(value(response, "predict")) == [str(c).encode() for c in iris.predict(x)]
    proba = value(response, "predict_proba")
    assert proba.dtype == np.float64
    np.testing.assert_allclose(proba, iris.predict_proba(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("binary", MODES)
def test_infer_text_python(server: ServerProcess, binary: bool) -> None:
    words = ["kserve", "", "stra\u00dfe", "nul\x00byte", "\u00e7a va"]
    text = np.array([w.encode() for w in words], dtype=object)
    req = request("text_python", [kinput("TEXT", text, "BYTES", binary)])
    assert_wire_encoding(req, binary)
    response = infer(server, req)
    assert as_bytes_list(value(response, "UPPER")) == [w.upper().encode() for w in words]
    lengths = value(response, "LENGTH")
    assert lengths.dtype == np.int64
    assert lengths.tolist() == [len(w.encode()) for w in words]


@pytest.mark.parametrize("binary", MODES)
def test_infer_versions(server: ServerProcess, binary: bool) -> None:
    x = np.array([[1.0, -2.0], [0.25, 8.0]], dtype=np.float32)
    expected = {"1": x, "2": x * np.float32(2.0)}
    for version in ("1", "2"):
        req = request(
            "versioned_python", [kinput("INPUT0", x, "FP32", binary)], model_version=version
        )
        response = infer(server, req)
        assert response.model_version == version
        np.testing.assert_array_equal(value(response, "OUTPUT0"), expected[version])
    latest = infer(server, request("versioned_python", [kinput("INPUT0", x, "FP32", binary)]))
    assert latest.model_version == "2"
    np.testing.assert_array_equal(value(latest, "OUTPUT0"), expected["2"])
    unknown = request("versioned_python", [kinput("INPUT0", x, "FP32", binary)], model_version="6")
    expect_error(server, lambda c: c.infer(unknown), grpc.StatusCode.NOT_FOUND, "6")


@pytest.mark.parametrize("binary", MODES)
def test_requested_outputs(server: ServerProcess, iris: Any, binary: bool) -> None:
    x = np.array([[5.8, 2.7, 5.1, 1.9]], dtype=np.float64)
    req = request(
        "iris_sklearn",
        [kinput("input", x, "FP64", binary)],
        request_outputs=[RequestedOutput("predict_proba")],
    )
    response = infer(server, req)
    assert output_names(response) == ["predict_proba"]
    np.testing.assert_allclose(value(response, "predict_proba"), iris.predict_proba(x))


@pytest.mark.parametrize("binary", MODES)
def test_parameters_reach_model(server: ServerProcess, binary: bool) -> None:
    sent = {"mode": "fast", "blank": "", "n": -12, "huge": 2**62, "on": True, "off": False}
    x = np.array([1, 2, 3], dtype=np.int32)
    req = request("params_async", [kinput("INPUT0", x, "INT32", binary)], parameters=sent)
    assert_wire_encoding(req, binary)
    response = infer(server, req)
    got = params_of(response)
    # kserve tags raw inputs with binary_data_size; that is an input parameter, not a request one
    assert got == sent
    assert got["on"] is True
    assert got["off"] is False
    assert value(response, "OUTPUT0").tolist() == [2, 3, 4]


@pytest.mark.parametrize("binary", MODES)
def test_model_errors(server: ServerProcess, binary: bool) -> None:
    x = np.array([1], dtype=np.int32)

    def failing(kind: str) -> InferRequest:
        return request(
            "params_async", [kinput("INPUT0", x, "INT32", binary)], parameters={"fail": kind}
        )

    value_error, crash = failing("value"), failing("crash")
    expect_error(
        server,
        lambda c: c.infer(value_error),
        grpc.StatusCode.INVALID_ARGUMENT,
        "asked for a ValueError",
    )
    expect_error(
        server,
        lambda c: c.infer(crash),
        grpc.StatusCode.INTERNAL,
        "RuntimeError",
        "asked for a crash",
    )
    assert_still_serving(server)


def test_unknown_model_and_bad_input(server: ServerProcess) -> None:
    x = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    unknown = request("no_such_model", [kinput("INPUT0", x, "FP32", True)])
    expect_error(server, lambda c: c.infer(unknown), grpc.StatusCode.NOT_FOUND, "no_such_model")
    wrong_type = request("mlp_onnx", [kinput("INPUT0", x.astype(np.float64), "FP64", False)])
    expect_error(server, lambda c: c.infer(wrong_type), grpc.StatusCode.INVALID_ARGUMENT, "FP64")
    # typed contents whose element count does not match the shape
    short = InferInput("INPUT0", [1, 4], "FP32", data=[1.0, 2.0, 3.0])
    expect_error(
        server,
        lambda c: c.infer(request("mlp_onnx", [short])),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INPUT0",
    )
    assert_still_serving(server)


def test_bytes_that_are_not_a_request(server: ServerProcess) -> None:
    """ModelInfer reads its request from bytes: what no reader can parse is INVALID_ARGUMENT."""
    with grpc.insecure_channel(server.grpc_address) as channel:
        model_infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        with pytest.raises(grpc.RpcError) as info:
            model_infer(b"\x0a\x05abc", timeout=30)  # a model_name cut short
    error: Any = info.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert "not a valid ModelInferRequest" in error.details()
    assert_still_serving(server)


# -- datatypes -----------------------------------------------------------------------------------


ROUNDTRIPS = [pytest.param(d, True, id=f"{d}-raw") for d in BINARY_DTYPES] + [
    pytest.param(d, False, id=f"{d}-contents") for d in CONTENTS_DTYPES
]


@pytest.mark.parametrize(("dtype", "binary"), ROUNDTRIPS)
def test_identity_roundtrip(server: ServerProcess, dtype: str, binary: bool) -> None:
    x = sample(dtype, binary)
    req = request(f"identity_{dtype.lower()}", [kinput("INPUT0", x, dtype, binary)])
    assert_wire_encoding(req, binary)
    response = infer(server, req)
    (out,) = response.outputs
    assert out.datatype == dtype
    assert list(out.shape) == [2, 4]
    assert_same(value(response, "OUTPUT0"), x, dtype)


def test_out_of_range_typed_contents(server: ServerProcess) -> None:
    """int_contents carries INT8 as int32: a value outside INT8 must be refused, not wrapped."""
    bad = InferInput("INPUT0", [1, 2], "INT8", data=[127, 300])
    expect_error(
        server,
        lambda c: c.infer(request("identity_int8", [bad])),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INT8",
    )
    ok = InferInput("INPUT0", [1, 2], "INT8", data=[127, -128])
    response = infer(server, request("identity_int8", [ok]))
    assert value(response, "OUTPUT0").tolist() == [[127, -128]]
    assert_still_serving(server)


def test_large_tensor_roundtrip(server: ServerProcess) -> None:
    x = rng_for("kserve-big").standard_normal((8, 1 << 20), dtype=np.float32)  # 32 MiB
    response = infer(server, request("identity_fp32", [kinput("INPUT0", x, "FP32", True)]))
    got = value(response, "OUTPUT0")
    assert got.shape == x.shape
    assert got.tobytes() == x.tobytes()
