"""The real server driven by kserve's official ``InferenceRESTClient`` (protocol v2).

The client is async (httpx); each test runs it with ``asyncio.run``. A small recording httpx
transport keeps every exchange so the tests can also look at what crossed the wire (which
outputs came back binary, the raw JSON header). Expected values are computed independently:
onnxruntime on the repository's ONNX file, joblib on the repository's pickle.

What kserve's REST client cannot do (so it is covered in test_oip_tritonclient.py instead):
server and model metadata (no such calls), a model version (only via the URL path, which is
what these tests do), BF16 tensors (kserve's numpy codec has no BF16: it can neither encode
nor decode one), and non-UTF-8 BYTES outputs (it decodes every BYTES output as UTF-8).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import numpy as np
import onnxruntime as ort
import pytest
from kserve import InferenceRESTClient, InferInput, InferRequest, InferResponse, RESTConfig
from kserve.errors import InvalidInput as KServeInvalidInput
from kserve.protocol.infer_type import RequestedOutput

from tests import v2data
from tests.integration.kserve_support import kinput, value
from tests.serverproc import ServerProcess
from tests.v2data import (
    DATATYPES,
    EXTREMES_64,
    JSON_DATATYPES,
    NUMPY_TYPES,
    as_bytes_list,
    assert_same,
    rng_for,
)

HEADER = "inference-header-content-length"

BINARY_DTYPES = [d for d in DATATYPES if d != "BF16"]  # kserve has no BF16 (module docstring)
MODES = [pytest.param(True, id="binary"), pytest.param(False, id="json")]
T = TypeVar("T")


# -- helpers (local to this module) ------------------------------------------------------------


@dataclass
class Exchange:
    method: str
    url: str
    request_headers: httpx.Headers
    request_body: bytes
    status: int
    response_headers: httpx.Headers
    response_body: bytes

    def response_doc(self) -> dict[str, Any]:
        """The JSON part of the response (before any binary tensor data)."""
        length = int(self.response_headers.get(HEADER, len(self.response_body)))
        doc: dict[str, Any] = json.loads(self.response_body[:length])
        return doc

    def request_doc(self) -> dict[str, Any]:
        length = int(self.request_headers.get(HEADER, len(self.request_body)))
        doc: dict[str, Any] = json.loads(self.request_body[:length])
        return doc

    def output(self, name: str) -> dict[str, Any]:
        for out in self.response_doc()["outputs"]:
            if out["name"] == name:
                return dict(out)
        raise AssertionError(f"output {name} not in {self.response_doc()}")


class Recorder(httpx.AsyncBaseTransport):
    """An httpx transport that forwards to the real one and keeps each exchange."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.exchanges: list[Exchange] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        response = await self._inner.handle_async_request(request)
        raw = b"".join([chunk async for chunk in response.aiter_raw()])
        await response.aclose()
        self.exchanges.append(
            Exchange(
                request.method,
                str(request.url),
                request.headers,
                body,
                response.status_code,
                response.headers,
                raw,
            )
        )
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=httpx.ByteStream(raw),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()

    @property
    def last(self) -> Exchange:
        return self.exchanges[-1]


Call = Callable[[InferenceRESTClient], Awaitable[T]]


def run(fn: Call[T]) -> tuple[T, Recorder]:
    """Run ``fn(client)`` on a fresh event loop with a fresh client; return its result."""
    recorder = Recorder()

    async def main() -> T:
        client = InferenceRESTClient(RESTConfig(protocol="v2", transport=recorder, timeout=60))
        try:
            return await fn(client)
        finally:
            await client.close()

    return asyncio.run(main()), recorder


def infer(
    server: ServerProcess, request: InferRequest | dict[str, Any], model: str
) -> tuple[InferResponse, Recorder]:
    return run(lambda c: c.infer(server.http_url, request, model_name=model))


def infer_error(
    server: ServerProcess,
    request: InferRequest | dict[str, Any],
    model: str,
    status: int,
    *fragments: str,
) -> httpx.HTTPStatusError:
    with pytest.raises(httpx.HTTPStatusError) as info:
        infer(server, request, model)
    exc = info.value
    assert exc.response.status_code == status, str(exc)
    for fragment in fragments:
        assert fragment in str(exc), str(exc)
    return exc


def outputs(names: list[str], binary: bool | None) -> list[RequestedOutput]:
    params = None if binary is None else {"binary_data": binary}
    return [RequestedOutput(n, dict(params) if params else None) for n in names]


def request(
    model: str,
    inputs: list[InferInput],
    *,
    requested: list[RequestedOutput] | None = None,
    request_id: str | None = None,
    parameters: dict[str, Any] | None = None,
) -> InferRequest:
    return InferRequest(
        model_name=model,
        infer_inputs=inputs,
        request_id=request_id,
        parameters=parameters,
        request_outputs=requested,
    )


def assert_encoding(exchange: Exchange, name: str, binary: bool) -> None:
    out = exchange.output(name)
    params = out.get("parameters") or {}
    if binary:
        assert "binary_data_size" in params, out
        assert "data" not in out, out
        assert HEADER in exchange.response_headers
    else:
        assert "data" in out, out
        assert "binary_data_size" not in params, out


def sample(dtype: str, binary: bool) -> np.ndarray:
    """Non-finite floats only in binary mode; kserve decodes every BYTES output as UTF-8."""
    return v2data.sample(dtype, "kserve", non_finite=binary, non_utf8=False)


def assert_still_serving(server: ServerProcess) -> None:
    async def check(c: InferenceRESTClient) -> InferResponse:
        assert await c.is_server_live(server.http_url) is True
        assert await c.is_server_ready(server.http_url) is True
        x = np.array([[3.0, -1.0]], dtype=np.float32)
        req = request("versioned_python", [kinput("INPUT0", x, "FP32", True)])
        response: InferResponse = await c.infer(
            server.http_url, req, model_name="versioned_python/versions/1"
        )
        np.testing.assert_array_equal(value(response, "OUTPUT0"), x)
        return response

    run(check)


def binary_params(binary: bool) -> dict[str, Any] | None:
    return {"binary_data_output": True} if binary else None


# -- health ------------------------------------------------------------------------------------


def test_health_live_and_ready(server: ServerProcess) -> None:
    async def check(c: InferenceRESTClient) -> tuple[Any, Any]:
        return await c.is_server_live(server.http_url), await c.is_server_ready(server.http_url)

    (live, ready), rec = run(check)
    assert live is True
    assert ready is True
    # kserve's client needs JSON health bodies; check they are what the spec says
    assert [json.loads(e.response_body) for e in rec.exchanges] == [{"live": True}, {"ready": True}]


def test_model_ready(server: ServerProcess) -> None:
    models = [
        "mlp_onnx",
        "iris_sklearn",
        "text_python",
        "versioned_python",
        "params_async",
        "stream_python",
        "identity_bf16",
        "versioned_python/versions/1",
        "versioned_python/versions/2",
    ]

    async def check(c: InferenceRESTClient) -> dict[str, bool]:
        names = [*models, "versioned_python/versions/3", "no_such_model"]
        return {m: await c.is_model_ready(server.http_url, m) for m in names}

    ready, rec = run(check)
    for model in models:
        assert ready[model] is True, model
    # kserve's is_model_ready answers False for any non-2xx instead of raising
    assert ready["versioned_python/versions/3"] is False
    assert ready["no_such_model"] is False
    statuses = {e.url.rsplit("/v2/models/", 1)[1]: e.status for e in rec.exchanges}
    assert statuses["versioned_python/versions/3/ready"] == 404
    assert statuses["no_such_model/ready"] in (400, 404)


# -- inference on the example models -----------------------------------------------------------


@pytest.mark.parametrize("binary", MODES)
def test_infer_mlp_onnx(
    server: ServerProcess, mlp_session: ort.InferenceSession, binary: bool
) -> None:
    x = rng_for("kserve-mlp").standard_normal((6, 4)).astype(np.float32)
    (expected,) = mlp_session.run(["OUTPUT0"], {"INPUT0": x})
    req = request(
        "mlp_onnx",
        [kinput("INPUT0", x, "FP32", binary)],
        request_id="mlp-kserve",
        parameters=binary_params(binary),
    )
    response, rec = infer(server, req, "mlp_onnx")
    assert response.model_name == "mlp_onnx"
    assert response.id == "mlp-kserve"
    doc = rec.last.response_doc()
    assert doc["model_version"] == "1"
    out = rec.last.output("OUTPUT0")
    assert (out["datatype"], out["shape"]) == ("FP32", [6, 3])
    assert_encoding(rec.last, "OUTPUT0", binary)
    got = value(response, "OUTPUT0")
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("binary", MODES)
def test_infer_iris_sklearn(server: ServerProcess, iris: Any, binary: bool) -> None:
    x = np.array(
        [[4.9, 3.0, 1.4, 0.2], [6.4, 3.2, 4.5, 1.5], [6.3, 3.3, 6.0, 2.5], [5.0, 2.0, 3.5, 1.0]],
        dtype=np.float64,
    )
    req = request(
        "iris_sklearn", [kinput("input", x, "FP64", binary)], parameters=binary_params(binary)
    )
    response, rec = infer(server, req, "iris_sklearn")
    assert [o.name for o in response.outputs] == ["predict", "predict_proba"]
    for name in ("predict", "predict_proba"):
        assert_encoding(rec.last, name, binary)
    assert rec.last.output("predict")["datatype"] == "BYTES"
    assert as_bytes_list(value(response, "predict")) == [str(s).encode() for s in iris.predict(x)]
    proba = value(response, "predict_proba")
    assert proba.shape == (4, 3)
    np.testing.assert_allclose(proba, iris.predict_proba(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("binary", MODES)
def test_infer_text_python(server: ServerProcess, binary: bool) -> None:
    texts = ["kserve", "", "stra\u00dfe \u00e0 la carte", "nul\x00inside", "42"]
    data = np.array([t.encode() for t in texts], dtype=object)
    req = request(
        "text_python", [kinput("TEXT", data, "BYTES", binary)], parameters=binary_params(binary)
    )
    response, rec = infer(server, req, "text_python")
    for name in ("UPPER", "LENGTH"):
        assert_encoding(rec.last, name, binary)
    assert as_bytes_list(value(response, "UPPER")) == [t.upper().encode() for t in texts]
    length = value(response, "LENGTH")
    assert length.dtype == np.int64
    assert length.tolist() == [len(t.encode()) for t in texts]


@pytest.mark.parametrize("binary", MODES)
def test_infer_versions(server: ServerProcess, binary: bool) -> None:
    x = rng_for("kserve-versions").standard_normal((4, 2)).astype(np.float32)

    def call(path: str) -> tuple[np.ndarray, str]:
        req = request(
            "versioned_python",
            [kinput("INPUT0", x, "FP32", binary)],
            parameters=binary_params(binary),
        )
        response, rec = infer(server, req, path)
        return value(response, "OUTPUT0"), rec.last.response_doc()["model_version"]

    v1, v1_version = call("versioned_python/versions/1")
    v2, v2_version = call("versioned_python/versions/2")
    latest, latest_version = call("versioned_python")
    assert (v1_version, v2_version, latest_version) == ("1", "2", "2")
    np.testing.assert_array_equal(v1, x)
    np.testing.assert_array_equal(v2, x * np.float32(2.0))
    np.testing.assert_array_equal(latest, x * np.float32(2.0))


@pytest.mark.parametrize("binary", MODES)
def test_infer_unknown_version_is_404(server: ServerProcess, binary: bool) -> None:
    x = np.ones((1, 1), dtype=np.float32)
    req = request("versioned_python", [kinput("INPUT0", x, "FP32", binary)])
    infer_error(server, req, "versioned_python/versions/3", 404, "3")
    req = request("mlp_onnx", [kinput("INPUT0", np.ones((1, 4), np.float32), "FP32", binary)])
    infer_error(server, req, "mlp_onnx/versions/5", 404, "5")
    assert_still_serving(server)


@pytest.mark.parametrize("binary", MODES)
def test_request_id_echo(server: ServerProcess, binary: bool) -> None:
    x = np.array([[1, 2, 3]], dtype=np.int32)
    for request_id in ("7", "id-\u00fc\u00f1\u00ee", "y" * 500):
        req = request(
            "identity_int32", [kinput("INPUT0", x, "INT32", binary)], request_id=request_id
        )
        response, rec = infer(server, req, "identity_int32")
        assert response.id == request_id
        assert rec.last.response_doc()["id"] == request_id
    # without an id kserve sends a fresh uuid4; that one must come back
    req = request("identity_int32", [kinput("INPUT0", x, "INT32", binary)])
    response, rec = infer(server, req, "identity_int32")
    sent = rec.last.request_doc()["id"]
    assert sent
    assert response.id == sent


def test_empty_request_id_is_echoed(server: ServerProcess) -> None:
    # kserve replaces "" by a uuid in InferRequest, so send the protocol dict itself
    body = {
        "id": "",
        "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 2], "data": [5, 6]}],
    }
    response, rec = infer(server, body, "identity_int32")
    assert rec.last.response_doc()["id"] == ""
    assert response.id == ""
    assert value(response, "OUTPUT0").tolist() == [[5, 6]]


# -- outputs filter and binary_data ------------------------------------------------------------


@pytest.mark.parametrize("binary", MODES)
def test_outputs_filter(server: ServerProcess, iris: Any, binary: bool) -> None:
    x = np.array([[5.8, 2.7, 5.1, 1.9], [5.7, 2.8, 4.1, 1.3]], dtype=np.float64)

    def call(names: list[str]) -> tuple[InferResponse, Recorder]:
        req = request(
            "iris_sklearn", [kinput("input", x, "FP64", binary)], requested=outputs(names, binary)
        )
        return infer(server, req, "iris_sklearn")

    response, rec = call(["predict_proba"])
    assert [o.name for o in response.outputs] == ["predict_proba"]
    assert response.get_output_by_name("predict") is None
    assert_encoding(rec.last, "predict_proba", binary)
    np.testing.assert_allclose(value(response, "predict_proba"), iris.predict_proba(x))

    response, _ = call(["predict"])
    assert [o.name for o in response.outputs] == ["predict"]
    assert as_bytes_list(value(response, "predict")) == [str(s).encode() for s in iris.predict(x)]

    response, rec = call(["predict_proba", "predict"])
    assert sorted(o.name for o in response.outputs) == ["predict", "predict_proba"]
    np.testing.assert_allclose(value(response, "predict_proba"), iris.predict_proba(x))
    assert as_bytes_list(value(response, "predict")) == [str(s).encode() for s in iris.predict(x)]
    for name in ("predict", "predict_proba"):
        assert_encoding(rec.last, name, binary)


def test_binary_data_per_output(server: ServerProcess) -> None:
    texts = ["ab", "", "x\x00y"]
    data = np.array([t.encode() for t in texts], dtype=object)
    for in_binary in (True, False):
        for upper_binary, length_binary in ((True, False), (False, True)):
            req = request(
                "text_python",
                [kinput("TEXT", data, "BYTES", in_binary)],
                requested=[
                    RequestedOutput("UPPER", {"binary_data": upper_binary}),
                    RequestedOutput("LENGTH", {"binary_data": length_binary}),
                ],
            )
            response, rec = infer(server, req, "text_python")
            assert_encoding(rec.last, "UPPER", upper_binary)
            assert_encoding(rec.last, "LENGTH", length_binary)
            assert as_bytes_list(value(response, "UPPER")) == [t.upper().encode() for t in texts]
            assert value(response, "LENGTH").tolist() == [2, 0, 3]


def test_binary_data_output_default(server: ServerProcess) -> None:
    data = np.array([b"abc", b"\x00"], dtype=object)
    inputs = [kinput("TEXT", data, "BYTES", False)]

    # the request-level default, no outputs listed: every output binary
    response, rec = infer(
        server,
        request("text_python", inputs, parameters={"binary_data_output": True}),
        "text_python",
    )
    assert rec.last.response_headers["content-type"] == "application/octet-stream"
    assert_encoding(rec.last, "UPPER", True)
    assert_encoding(rec.last, "LENGTH", True)
    assert rec.last.output("LENGTH")["parameters"]["binary_data_size"] == 2 * 8
    assert rec.last.output("UPPER")["parameters"]["binary_data_size"] == (4 + 3) + (4 + 1)
    assert value(response, "LENGTH").tolist() == [3, 1]

    # an output's own binary_data wins over the default; a listed output without one takes
    # the default (KServe's rule, which its client relies on)
    req = request(
        "text_python",
        inputs,
        requested=[RequestedOutput("UPPER", {"binary_data": False}), RequestedOutput("LENGTH")],
        parameters={"binary_data_output": True},
    )
    response, rec = infer(server, req, "text_python")
    assert_encoding(rec.last, "UPPER", False)
    assert_encoding(rec.last, "LENGTH", True)
    assert as_bytes_list(value(response, "UPPER")) == [b"ABC", b"\x00"]

    # no default: JSON unless an output asks for binary
    req = request(
        "text_python", inputs, requested=[RequestedOutput("UPPER"), *outputs(["LENGTH"], True)]
    )
    response, rec = infer(server, req, "text_python")
    assert_encoding(rec.last, "UPPER", False)
    assert_encoding(rec.last, "LENGTH", True)
    assert value(response, "LENGTH").tolist() == [3, 1]

    # nothing binary at all: a plain JSON response without the header
    response, rec = infer(server, request("text_python", inputs), "text_python")
    assert HEADER not in rec.last.response_headers
    assert rec.last.response_headers["content-type"] == "application/json"
    assert_encoding(rec.last, "UPPER", False)
    assert_encoding(rec.last, "LENGTH", False)


# -- datatypes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", BINARY_DTYPES)
def test_identity_roundtrip_binary(server: ServerProcess, dtype: str) -> None:
    data = sample(dtype, binary=True)
    model = f"identity_{dtype.lower()}"
    req = request(
        model, [kinput("INPUT0", data, dtype, True)], requested=outputs(["OUTPUT0"], True)
    )
    response, rec = infer(server, req, model)
    assert rec.last.request_headers["content-type"] == "application/octet-stream"
    out = rec.last.output("OUTPUT0")
    assert (out["datatype"], out["shape"]) == (dtype, [2, 4])
    assert_encoding(rec.last, "OUTPUT0", True)
    assert_same(value(response, "OUTPUT0"), data, dtype)


@pytest.mark.parametrize("dtype", JSON_DATATYPES)
def test_identity_roundtrip_json(server: ServerProcess, dtype: str) -> None:
    data = sample(dtype, binary=False)
    model = f"identity_{dtype.lower()}"
    req = request(model, [kinput("INPUT0", data, dtype, False)])
    response, rec = infer(server, req, model)
    assert rec.last.request_headers["content-type"] == "application/json"
    out = rec.last.output("OUTPUT0")
    assert (out["datatype"], out["shape"]) == (dtype, [2, 4])
    assert_encoding(rec.last, "OUTPUT0", False)
    assert_same(value(response, "OUTPUT0"), data, dtype)


def test_fp16_json_refused(server: ServerProcess) -> None:
    # kserve itself refuses to put FP16 in JSON ...
    inp = kinput("INPUT0", np.array([[1.0, 2.0]], dtype=np.float16), "FP16", False)
    with pytest.raises(KServeInvalidInput, match="FP16"):
        infer(server, request("identity_fp16", [inp]), "identity_fp16")
    # ... and so must the server, when the JSON is sent anyway
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP16", "shape": [1, 2], "data": [1.0, 2.0]}]}
    infer_error(server, body, "identity_fp16", 400, "FP16")
    assert_still_serving(server)


def test_bf16_json_refused(server: ServerProcess) -> None:
    body = {"inputs": [{"name": "INPUT0", "datatype": "BF16", "shape": [1, 2], "data": [1.0, 2.0]}]}
    infer_error(server, body, "identity_bf16", 400, "BF16")
    assert_still_serving(server)


def test_fp16_json_output_refused(server: ServerProcess) -> None:
    data = np.array([[0.5, -1.5]], dtype=np.float16)
    req = request(
        "identity_fp16",
        [kinput("INPUT0", data, "FP16", True)],
        requested=outputs(["OUTPUT0"], False),
    )
    infer_error(server, req, "identity_fp16", 400, "FP16", "binary")
    assert_still_serving(server)


@pytest.mark.parametrize("binary", MODES)
def test_bytes_nul_and_empty(server: ServerProcess, binary: bool) -> None:
    items = [[b"", b"\x00", b"a\x00b\x00"], [b"\x00\x00\x00", b"", b"no nul"]]
    data = np.array(items, dtype=object)
    req = request(
        "identity_bytes",
        [kinput("INPUT0", data, "BYTES", binary)],
        requested=outputs(["OUTPUT0"], binary),
    )
    response, rec = infer(server, req, "identity_bytes")
    assert_encoding(rec.last, "OUTPUT0", binary)
    got = value(response, "OUTPUT0")
    assert got.shape == (2, 3)
    assert as_bytes_list(got) == [b for row in items for b in row]


@pytest.mark.parametrize("binary", MODES)
@pytest.mark.parametrize(("dtype", "values"), list(EXTREMES_64.items()))
def test_int64_uint64_extremes(
    server: ServerProcess, dtype: str, values: list[int], binary: bool
) -> None:
    data = np.array([values], dtype=NUMPY_TYPES[dtype])
    model = f"identity_{dtype.lower()}"
    req = request(
        model, [kinput("INPUT0", data, dtype, binary)], requested=outputs(["OUTPUT0"], binary)
    )
    response, _ = infer(server, req, model)
    got = value(response, "OUTPUT0")
    assert got.dtype == data.dtype
    assert [int(v) for v in got.ravel()] == values


@pytest.mark.parametrize(
    ("in_binary", "out_binary"),
    [(False, False), (False, True), (True, True)],
    ids=["json-json", "json-binary", "binary-binary"],
)
@pytest.mark.parametrize("shape", [[1, 0], [0, 0]])
@pytest.mark.parametrize("dtype", ["BOOL", "INT64", "FP32", "BYTES"])
def test_empty_tensors(
    server: ServerProcess, dtype: str, shape: list[int], in_binary: bool, out_binary: bool
) -> None:
    # binary input: for an empty tensor kserve's to_rest() sends "data": null beside
    # "binary_data_size": 0 (it treats b"" as no raw data); KServe's own server reads the
    # null as absent and takes the 0-byte binary input.
    data = np.empty(shape, dtype=NUMPY_TYPES[dtype])
    model = f"identity_{dtype.lower()}"
    req = request(
        model,
        [kinput("INPUT0", data, dtype, in_binary)],
        requested=outputs(["OUTPUT0"], out_binary),
    )
    response, rec = infer(server, req, model)
    out = rec.last.output("OUTPUT0")
    assert (out["datatype"], out["shape"]) == (dtype, shape)
    assert_encoding(rec.last, "OUTPUT0", out_binary)
    got = value(response, "OUTPUT0")
    assert list(got.shape) == shape
    assert got.size == 0


# -- request parameters and model errors -------------------------------------------------------


@pytest.mark.parametrize("binary", MODES)
def test_parameters_reach_model(server: ServerProcess, binary: bool) -> None:
    params = {"name": "kserve", "count": 3, "flag": False, "ratio": 0.75}
    x = np.array([0, 10, -3], dtype=np.int32)
    for extra in ({}, {"binary_data_output": True}):
        req = request(
            "params_async",
            [kinput("INPUT0", x, "INT32", binary)],
            requested=None if extra else outputs(["OUTPUT0", "PARAMS"], binary),
            parameters={**params, **extra},
        )
        response, rec = infer(server, req, "params_async")
        assert rec.last.request_doc()["parameters"] == {**params, **extra}
        assert value(response, "OUTPUT0").tolist() == (x + 1).tolist()
        (reported,) = as_bytes_list(value(response, "PARAMS"))
        # binary_data_output is the binary extension's, not the model's
        assert json.loads(reported) == params


@pytest.mark.parametrize("binary", MODES)
def test_model_value_error_is_400(server: ServerProcess, binary: bool) -> None:
    req = request(
        "params_async",
        [kinput("INPUT0", np.array([1], dtype=np.int32), "INT32", binary)],
        parameters={"fail": "value"},
    )
    infer_error(server, req, "params_async", 400, "parameter 'fail' asked for a ValueError")
    assert_still_serving(server)


@pytest.mark.parametrize("binary", MODES)
def test_model_exception_is_500(server: ServerProcess, binary: bool) -> None:
    inputs = [kinput("INPUT0", np.array([4, 5], dtype=np.int32), "INT32", binary)]
    infer_error(
        server,
        request("params_async", inputs, parameters={"fail": "crash"}),
        "params_async",
        500,
        "parameter 'fail' asked for a crash",
    )
    assert_still_serving(server)
    response, _ = infer(server, request("params_async", inputs), "params_async")
    assert value(response, "OUTPUT0").tolist() == [5, 6]


@pytest.mark.parametrize("binary", MODES)
def test_streaming_model_refuses_unary_infer(server: ServerProcess, binary: bool) -> None:
    req = request(
        "stream_python", [kinput("INPUT0", np.array([1, 2], dtype=np.int32), "INT32", binary)]
    )
    exc = infer_error(server, req, "stream_python", 400)
    assert "stream" in str(exc).lower()
    assert_still_serving(server)


@pytest.mark.parametrize("binary", MODES)
def test_bad_requests_leave_server_serving(server: ServerProcess, binary: bool) -> None:
    good = np.zeros((2, 4), dtype=np.float32)

    def one(model: str, name: str, array: np.ndarray, datatype: str, **kw: Any) -> InferRequest:
        return request(model, [kinput(name, array, datatype, binary)], **kw)

    def raw(datatype: str, shape: list[int], data: list[Any]) -> dict[str, Any]:
        tensor = {"name": "INPUT0", "datatype": datatype, "shape": shape, "data": data}
        return {"inputs": [tensor]}

    missing = outputs(["MISSING"], binary)
    batch9 = np.zeros((9, 2), np.float32)
    cases: list[tuple[str, InferRequest | dict[str, Any], int, tuple[str, ...]]] = [
        ("mlp_onnx", one("mlp_onnx", "INPUT0", good.astype(np.float64), "FP64"), 400,
         ("FP64", "FP32")),
        ("mlp_onnx", one("mlp_onnx", "INPUT0", np.zeros((3, 2), np.float32), "FP32"), 400,
         ("shape",)),
        ("mlp_onnx", one("mlp_onnx", "X", good, "FP32"), 400, ("X",)),
        ("mlp_onnx", one("mlp_onnx", "INPUT0", good, "FP32", requested=missing), 400,
         ("MISSING",)),
        ("versioned_python", one("versioned_python", "INPUT0", batch9, "FP32"), 400, ("batch",)),
        ("identity_int8", raw("INT8", [1, 2], [1, 300]), 400, ("INT8",)),
        ("identity_bool", raw("BOOL", [1, 3], [True, False]), 400, ("3",)),
        ("identity_fp32", raw("NOPE", [1], [1]), 400, ("NOPE",)),
        ("identity_fp32", {"inputs": "not a list"}, 400, ("inputs",)),
    ]  # fmt: skip
    for model, req, status, fragments in cases:
        infer_error(server, req, model, status, *fragments)
    with pytest.raises(httpx.HTTPStatusError) as info:
        infer(
            server,
            request("no_such_model", [kinput("INPUT0", good, "FP32", binary)]),
            "no_such_model",
        )
    assert info.value.response.status_code in (400, 404)
    assert "no_such_model" in str(info.value)
    assert_still_serving(server)
