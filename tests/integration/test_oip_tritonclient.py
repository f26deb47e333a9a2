"""The real server driven by the official ``tritonclient.http`` client, in binary and JSON mode.

Expected values are computed independently of the server: the MLP with onnxruntime on the
repository's ONNX file, the iris classifier with joblib on the repository's pickle, the
Python example models by re-stating what their ``predict`` does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from importlib.metadata import version as dist_version
from typing import Any

import httpx
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests import v2data
from tests.serverproc import ServerProcess
from tests.tritonclient_common import expect_error
from tests.v2data import (
    DATATYPES,
    EXTREMES_64,
    JSON_DATATYPES,
    MODEL_SIGNATURES,
    NUMPY_TYPES,
    Tensor,
    as_bytes_list,
    assert_same,
    rng_for,
)

MODES = [pytest.param(True, id="binary"), pytest.param(False, id="json")]


# -- helpers (local to this module) ------------------------------------------------------------


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(server.http_hostport, network_timeout=60.0)
    yield c
    c.close()


def make_input(name: str, array: np.ndarray, datatype: str, binary: bool) -> httpclient.InferInput:
    inp = httpclient.InferInput(name, list(array.shape), datatype)
    inp.set_data_from_numpy(array, binary_data=binary)
    return inp


def want(names: list[str], binary: bool) -> list[httpclient.InferRequestedOutput]:
    return [httpclient.InferRequestedOutput(n, binary_data=binary) for n in names]


def assert_encoding(result: httpclient.InferResult, name: str, binary: bool) -> None:
    """The output came back the way it was asked for: binary blob or JSON 'data'."""
    out = result.get_output(name)
    assert out is not None, f"output {name} missing from {result.get_response()}"
    params = out.get("parameters") or {}
    if binary:
        assert "binary_data_size" in params, out
        assert "data" not in out, out
    else:
        assert "data" in out, out
        assert "binary_data_size" not in params, out


def output_names(result: httpclient.InferResult) -> list[str]:
    return [o["name"] for o in result.get_response()["outputs"]]


def sample(dtype: str, binary: bool) -> np.ndarray:
    """Non-UTF-8 bytes only in binary mode (JSON strings cannot carry them); NaN and the
    infinities both ways (JSON carries them as NaN, Infinity, -Infinity)."""
    return v2data.sample(dtype, "", non_finite=True, non_utf8=binary)


def assert_still_serving(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    x = np.array([[1.5, -2.0]], dtype=np.float32)
    result = client.infer("versioned_python", [make_input("INPUT0", x, "FP32", True)], "1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)


# -- health and metadata -----------------------------------------------------------------------


def test_health_live_and_ready(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live() is True
    assert client.is_server_ready() is True


def test_server_metadata(client: httpclient.InferenceServerClient) -> None:
    meta = client.get_server_metadata()
    assert meta["name"] == "rosettaserve"
    assert meta["version"] == dist_version("rosettaserve")
    assert isinstance(meta["extensions"], list)
    assert "binary_tensor_data" in meta["extensions"]


def _sig(tensors: list[Tensor]) -> list[dict[str, Any]]:
    return [{"name": n, "datatype": d, "shape": s} for n, d, s in tensors]


@pytest.mark.parametrize("model", sorted(MODEL_SIGNATURES))
def test_model_metadata(client: httpclient.InferenceServerClient, model: str) -> None:
    versions, inputs, outputs = MODEL_SIGNATURES[model]
    meta = client.get_model_metadata(model)
    assert meta["name"] == model
    assert meta["versions"] == versions
    assert isinstance(meta["platform"], str)
    assert meta["platform"]
    assert meta["inputs"] == _sig(inputs)
    assert meta["outputs"] == _sig(outputs)


def test_model_metadata_versioned_paths(client: httpclient.InferenceServerClient) -> None:
    for v in ("1", "2"):
        meta = client.get_model_metadata("versioned_python", v)
        assert meta["name"] == "versioned_python"
        assert meta["versions"] == ["1", "2"]
        assert meta["inputs"] == _sig([("INPUT0", "FP32", [-1, -1])])
    expect_error(lambda: client.get_model_metadata("versioned_python", "3"), "404", "3")
    expect_error(lambda: client.get_model_metadata("mlp_onnx", "2"), "404")
    with pytest.raises(InferenceServerException) as info:
        client.get_model_metadata("no_such_model")
    # unknown model: the spec says "typically 400", KServe/MLServer answer 404
    assert info.value.status() in ("400", "404")
    assert "no_such_model" in info.value.message()
    assert_still_serving(client)


def test_model_ready(client: httpclient.InferenceServerClient) -> None:
    for model in MODEL_SIGNATURES:
        assert client.is_model_ready(model) is True, model
    assert client.is_model_ready("versioned_python", "1") is True
    assert client.is_model_ready("versioned_python", "2") is True
    # tritonclient answers False (it only looks at the status code) rather than raising
    assert client.is_model_ready("versioned_python", "3") is False
    assert client.is_model_ready("mlp_onnx", "7") is False
    assert client.is_model_ready("no_such_model") is False
    assert client.is_model_ready("no_such_model", "1") is False


# -- inference on the example models -----------------------------------------------------------


@pytest.mark.parametrize("binary", MODES)
def test_infer_mlp_onnx(
    client: httpclient.InferenceServerClient, mlp_session: ort.InferenceSession, binary: bool
) -> None:
    x = rng_for("mlp").standard_normal((5, 4)).astype(np.float32)
    (expected,) = mlp_session.run(["OUTPUT0"], {"INPUT0": x})
    result = client.infer(
        "mlp_onnx",
        [make_input("INPUT0", x, "FP32", binary)],
        outputs=want(["OUTPUT0"], binary),
        request_id="mlp-1",
    )
    response = result.get_response()
    assert response["model_name"] == "mlp_onnx"
    assert response["model_version"] == "1"
    assert response["id"] == "mlp-1"
    out = result.get_output("OUTPUT0")
    assert out["datatype"] == "FP32"
    assert out["shape"] == [5, 3]
    assert_encoding(result, "OUTPUT0", binary)
    got = result.as_numpy("OUTPUT0")
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("binary", MODES)
def test_infer_iris_sklearn(
    client: httpclient.InferenceServerClient, iris: Any, binary: bool
) -> None:
    x = np.array(
        [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3], [5.9, 3.0, 4.2, 1.5], [6.3, 2.5, 4.9, 1.5]],
        dtype=np.float64,
    )
    result = client.infer(
        "iris_sklearn",
        [make_input("input", x, "FP64", binary)],
        outputs=want(["predict", "predict_proba"], binary),
    )
    assert output_names(result) == ["predict", "predict_proba"]
    for name in ("predict", "predict_proba"):
        assert_encoding(result, name, binary)
    assert result.get_output("predict")["datatype"] == "BYTES"
    assert result.get_output("predict")["shape"] == [4]
    assert as_bytes_list(result.as_numpy("predict")) == [
        str(label).encode() for label in iris.predict(x)
    ]
    proba = result.as_numpy("predict_proba")
    assert result.get_output("predict_proba")["datatype"] == "FP64"
    assert proba.shape == (4, 3)
    np.testing.assert_allclose(proba, iris.predict_proba(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("binary", MODES)
def test_infer_text_python(client: httpclient.InferenceServerClient, binary: bool) -> None:
    texts = ["hello", "", "Gr\u00fc\u00dfe \u00e9t\u00e9", "a\x00b", "MiXeD 123"]
    data = np.array([t.encode() for t in texts], dtype=object)
    result = client.infer("text_python", [make_input("TEXT", data, "BYTES", binary)])
    # no outputs given: tritonclient sets binary_data_output=true, so everything is binary
    assert output_names(result) == ["UPPER", "LENGTH"]
    assert_encoding(result, "UPPER", True)
    assert_encoding(result, "LENGTH", True)
    assert as_bytes_list(result.as_numpy("UPPER")) == [t.upper().encode() for t in texts]
    length = result.as_numpy("LENGTH")
    assert length.dtype == np.int64
    assert length.tolist() == [len(t.encode()) for t in texts]


@pytest.mark.parametrize("binary", MODES)
def test_infer_versions(client: httpclient.InferenceServerClient, binary: bool) -> None:
    x = rng_for("versions").standard_normal((3, 5)).astype(np.float32)

    def run(model_version: str) -> httpclient.InferResult:
        return client.infer(
            "versioned_python",
            [make_input("INPUT0", x, "FP32", binary)],
            model_version=model_version,
            outputs=want(["OUTPUT0"], binary),
        )

    v1, v2, latest = run("1"), run("2"), run("")
    assert v1.get_response()["model_version"] == "1"
    assert v2.get_response()["model_version"] == "2"
    assert latest.get_response()["model_version"] == "2"
    np.testing.assert_array_equal(v1.as_numpy("OUTPUT0"), x)
    np.testing.assert_array_equal(v2.as_numpy("OUTPUT0"), x * np.float32(2.0))
    np.testing.assert_array_equal(latest.as_numpy("OUTPUT0"), x * np.float32(2.0))
    assert not np.array_equal(v1.as_numpy("OUTPUT0"), v2.as_numpy("OUTPUT0"))


@pytest.mark.parametrize("binary", MODES)
def test_infer_unknown_version_is_404(
    client: httpclient.InferenceServerClient, binary: bool
) -> None:
    x = np.ones((1, 2), dtype=np.float32)
    inputs = [make_input("INPUT0", x, "FP32", binary)]
    expect_error(lambda: client.infer("versioned_python", inputs, model_version="3"), "404", "3")
    expect_error(lambda: client.infer("mlp_onnx", inputs, model_version="99"), "404", "99")
    assert_still_serving(client)


@pytest.mark.parametrize("binary", MODES)
def test_request_id_echo(client: httpclient.InferenceServerClient, binary: bool) -> None:
    x = np.array([[1.0, 2.0]], dtype=np.float32)
    for request_id in ("42", "req-\u00e9\u4e2d", "x" * 300, " spaced id "):
        result = client.infer(
            "identity_fp32", [make_input("INPUT0", x, "FP32", binary)], request_id=request_id
        )
        assert result.get_response()["id"] == request_id
    # request_id="" makes tritonclient send no "id" at all: none may come back
    result = client.infer("identity_fp32", [make_input("INPUT0", x, "FP32", binary)])
    assert result.get_response().get("id", "") == ""


# -- outputs filter and binary_data ------------------------------------------------------------


@pytest.mark.parametrize("binary", MODES)
def test_outputs_filter(client: httpclient.InferenceServerClient, binary: bool) -> None:
    texts = [b"abc", b"Zz"]
    data = np.array(texts, dtype=object)
    inputs = [make_input("TEXT", data, "BYTES", binary)]

    only_length = client.infer("text_python", inputs, outputs=want(["LENGTH"], binary))
    assert output_names(only_length) == ["LENGTH"]
    assert only_length.as_numpy("UPPER") is None
    assert only_length.as_numpy("LENGTH").tolist() == [3, 2]
    assert_encoding(only_length, "LENGTH", binary)

    only_upper = client.infer("text_python", inputs, outputs=want(["UPPER"], binary))
    assert output_names(only_upper) == ["UPPER"]
    assert as_bytes_list(only_upper.as_numpy("UPPER")) == [b"ABC", b"ZZ"]

    both = client.infer("text_python", inputs, outputs=want(["LENGTH", "UPPER"], binary))
    assert sorted(output_names(both)) == ["LENGTH", "UPPER"]
    assert both.as_numpy("LENGTH").tolist() == [3, 2]
    assert as_bytes_list(both.as_numpy("UPPER")) == [b"ABC", b"ZZ"]
    for name in ("LENGTH", "UPPER"):
        assert_encoding(both, name, binary)


def test_binary_data_per_output(client: httpclient.InferenceServerClient, iris: Any) -> None:
    x = np.array([[5.0, 3.4, 1.5, 0.2], [7.7, 2.6, 6.9, 2.3]], dtype=np.float64)
    expected_labels = [str(label).encode() for label in iris.predict(x)]
    expected_proba = iris.predict_proba(x)
    for inp_binary in (True, False):
        inputs = [make_input("input", x, "FP64", inp_binary)]
        for label_binary, proba_binary in ((True, False), (False, True)):
            result = client.infer(
                "iris_sklearn",
                inputs,
                outputs=[
                    httpclient.InferRequestedOutput("predict", binary_data=label_binary),
                    httpclient.InferRequestedOutput("predict_proba", binary_data=proba_binary),
                ],
            )
            assert_encoding(result, "predict", label_binary)
            assert_encoding(result, "predict_proba", proba_binary)
            assert as_bytes_list(result.as_numpy("predict")) == expected_labels
            np.testing.assert_allclose(
                result.as_numpy("predict_proba"), expected_proba, rtol=1e-12, atol=1e-12
            )


def test_binary_data_output_default(client: httpclient.InferenceServerClient, iris: Any) -> None:
    """No outputs listed: tritonclient sends parameters.binary_data_output=true."""
    x = np.array([[6.0, 2.2, 5.0, 1.5]], dtype=np.float64)
    result = client.infer("iris_sklearn", [make_input("input", x, "FP64", False)])
    assert output_names(result) == ["predict", "predict_proba"]
    proba_bytes = result.get_output("predict_proba")["parameters"]["binary_data_size"]
    assert proba_bytes == 3 * 8
    label = str(iris.predict(x)[0]).encode()
    assert result.get_output("predict")["parameters"]["binary_data_size"] == 4 + len(label)
    assert_encoding(result, "predict", True)
    assert_encoding(result, "predict_proba", True)
    assert as_bytes_list(result.as_numpy("predict")) == [label]
    np.testing.assert_allclose(result.as_numpy("predict_proba"), iris.predict_proba(x))


# -- datatypes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DATATYPES)
def test_identity_roundtrip_binary(client: httpclient.InferenceServerClient, dtype: str) -> None:
    data = sample(dtype, binary=True)
    model = f"identity_{dtype.lower()}"
    result = client.infer(
        model, [make_input("INPUT0", data, dtype, True)], outputs=want(["OUTPUT0"], True)
    )
    out = result.get_output("OUTPUT0")
    assert out["datatype"] == dtype
    assert out["shape"] == [2, 4]
    assert_encoding(result, "OUTPUT0", True)
    assert_same(result.as_numpy("OUTPUT0"), data, dtype)


@pytest.mark.parametrize("dtype", JSON_DATATYPES)
def test_identity_roundtrip_json(client: httpclient.InferenceServerClient, dtype: str) -> None:
    data = sample(dtype, binary=False)
    model = f"identity_{dtype.lower()}"
    result = client.infer(
        model, [make_input("INPUT0", data, dtype, False)], outputs=want(["OUTPUT0"], False)
    )
    out = result.get_output("OUTPUT0")
    assert out["datatype"] == dtype
    assert out["shape"] == [2, 4]
    assert_encoding(result, "OUTPUT0", False)
    assert_same(result.as_numpy("OUTPUT0"), data, dtype)


@pytest.mark.parametrize("dtype", JSON_DATATYPES)
@pytest.mark.parametrize(("in_binary", "out_binary"), [(True, False), (False, True)])
def test_identity_mixed_encodings(
    client: httpclient.InferenceServerClient, dtype: str, in_binary: bool, out_binary: bool
) -> None:
    data = sample(dtype, binary=False)
    result = client.infer(
        f"identity_{dtype.lower()}",
        [make_input("INPUT0", data, dtype, in_binary)],
        outputs=want(["OUTPUT0"], out_binary),
    )
    assert_encoding(result, "OUTPUT0", out_binary)
    assert_same(result.as_numpy("OUTPUT0"), data, dtype)


def test_fp16_json_input_refused(client: httpclient.InferenceServerClient) -> None:
    data = np.array([[1.0, -2.5]], dtype=np.float16)
    # tritonclient happily puts FP16 numbers in JSON; the server must refuse them
    inputs = [make_input("INPUT0", data, "FP16", False)]
    expect_error(lambda: client.infer("identity_fp16", inputs), "400", "FP16", "binary")
    assert_still_serving(client)


@pytest.mark.parametrize("dtype", ["FP16", "BF16"])
def test_half_json_output_refused(client: httpclient.InferenceServerClient, dtype: str) -> None:
    data = sample(dtype, binary=True)
    if dtype == "BF16":
        # tritonclient will not even put a BF16 input in JSON (FP16: see the test above)
        with pytest.raises(InferenceServerException, match="binary"):
            make_input("INPUT0", data, dtype, False)
    inputs = [make_input("INPUT0", data, dtype, True)]
    expect_error(
        lambda: client.infer(f"identity_{dtype.lower()}", inputs, outputs=want(["OUTPUT0"], False)),
        "400",
        dtype,
        "binary",
    )
    assert_still_serving(client)


def test_bytes_nul_and_empty(client: httpclient.InferenceServerClient) -> None:
    items = [[b"", b"\x00", b"a\x00b\x00"], [b"\x00\x00\x00", b"", b"no nul"]]
    data = np.array(items, dtype=object)
    for in_binary in (True, False):
        for out_binary in (True, False):
            result = client.infer(
                "identity_bytes",
                [make_input("INPUT0", data, "BYTES", in_binary)],
                outputs=want(["OUTPUT0"], out_binary),
            )
            got = result.as_numpy("OUTPUT0")
            assert got.shape == (2, 3)
            assert as_bytes_list(got) == [b for row in items for b in row]
    # the binary encoding is 4-byte length + bytes per element
    result = client.infer(
        "identity_bytes",
        [make_input("INPUT0", data, "BYTES", True)],
        outputs=want(["OUTPUT0"], True),
    )
    size = result.get_output("OUTPUT0")["parameters"]["binary_data_size"]
    assert size == sum(4 + len(b) for row in items for b in row)


@pytest.mark.parametrize("binary", MODES)
@pytest.mark.parametrize(("dtype", "values"), list(EXTREMES_64.items()))
def test_int64_uint64_extremes(
    client: httpclient.InferenceServerClient, dtype: str, values: list[int], binary: bool
) -> None:
    data = np.array([values], dtype=NUMPY_TYPES[dtype])
    result = client.infer(
        f"identity_{dtype.lower()}",
        [make_input("INPUT0", data, dtype, binary)],
        outputs=want(["OUTPUT0"], binary),
    )
    got = result.as_numpy("OUTPUT0")
    assert got.dtype == data.dtype
    assert [int(v) for v in got.ravel()] == values


@pytest.mark.parametrize("binary", MODES)
@pytest.mark.parametrize("shape", [[1, 0], [0, 0], [0, 3]])
@pytest.mark.parametrize("dtype", ["BOOL", "INT32", "UINT64", "FP32", "FP64", "BYTES"])
def test_empty_tensors(
    client: httpclient.InferenceServerClient, dtype: str, shape: list[int], binary: bool
) -> None:
    data = np.empty(shape, dtype=NUMPY_TYPES[dtype])
    result = client.infer(
        f"identity_{dtype.lower()}",
        [make_input("INPUT0", data, dtype, binary)],
        outputs=want(["OUTPUT0"], binary),
    )
    out = result.get_output("OUTPUT0")
    assert out["shape"] == shape
    assert out["datatype"] == dtype
    assert_encoding(result, "OUTPUT0", binary)
    if binary:
        assert out["parameters"]["binary_data_size"] == 0
    got = result.as_numpy("OUTPUT0")
    assert list(got.shape) == shape
    assert got.size == 0


@pytest.mark.parametrize("dtype", ["FP16", "BF16"])
def test_empty_half_tensors_binary(client: httpclient.InferenceServerClient, dtype: str) -> None:
    data = np.empty([1, 0], dtype=NUMPY_TYPES[dtype])
    result = client.infer(
        f"identity_{dtype.lower()}",
        [make_input("INPUT0", data, dtype, True)],
        outputs=want(["OUTPUT0"], True),
    )
    assert result.get_output("OUTPUT0")["shape"] == [1, 0]
    assert result.as_numpy("OUTPUT0").shape == (1, 0)


@pytest.mark.parametrize("size", [20_000, 400])
@pytest.mark.parametrize(
    "dtype", [d for d in JSON_DATATYPES if d not in ("BOOL", "BYTES", "FP16", "BF16")]
)
def test_large_json_tensors_round_trip(
    client: httpclient.InferenceServerClient, dtype: str, size: int
) -> None:
    """JSON data of 1 KiB and more (a body well over 64 KiB, or one of a few KiB): the server
    reads its flat numeric data in bulk, and it must come back exactly (integers at their
    extremes, floats at full precision)."""
    np_type = NUMPY_TYPES[dtype]
    rng = rng_for(f"large{dtype}{size}")
    if dtype.startswith(("UINT", "INT")):
        info = np.iinfo(np_type)
        flat = rng.integers(info.min, info.max, size=size, dtype=np_type, endpoint=True)
        flat[:2] = info.min, info.max
    else:
        flat = rng.standard_normal(size).astype(np_type)
    data = flat.reshape(2, size // 2)
    result = client.infer(
        f"identity_{dtype.lower()}",
        [make_input("INPUT0", data, dtype, False)],
        outputs=want(["OUTPUT0"], False),
    )
    assert_encoding(result, "OUTPUT0", False)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


@pytest.mark.parametrize("size", [20_000, 300])
def test_large_json_in_shortest_float32_text_round_trips(
    server: ServerProcess, client: httpclient.InferenceServerClient, size: int
) -> None:
    """FP32 data written as each value's shortest text ("-0.95217013"), as a person or a
    non-Python client writes it (tritonclient widens float32 to 17-digit doubles, above): the
    server's C reader takes this text, and every value must come back as the same float32."""
    flat = rng_for(f"short-text{size}").standard_normal(size).astype(np.float32)
    text = ",".join(str(v) for v in flat)
    head = f'{{"name":"INPUT0","shape":[2,{size // 2}],"datatype":"FP32"'
    body = f'{{"inputs":[{head},"data":[{text}]}}]}}'.encode()
    reply = httpx.post(
        f"http://{server.http_hostport}/v2/models/identity_fp32/infer",
        content=body,
        headers={"Content-Type": "application/json"},
        timeout=60.0,
    )
    assert reply.status_code == 200, reply.text
    out = reply.json()["outputs"][0]
    assert out["shape"] == [2, size // 2]
    np.testing.assert_array_equal(np.float32(out["data"]), flat)
    broken = body[:-40] + b"]}]}"  # cut inside the array: the last values lost
    refused = httpx.post(
        f"http://{server.http_hostport}/v2/models/identity_fp32/infer", content=broken
    )
    assert refused.status_code == 400
    held = broken.count(b",", broken.index(b'"data":[')) + 1  # the values left
    assert held < size
    assert f"holds {held} elements" in refused.json()["error"]
    assert_still_serving(client)


def test_large_binary_bodies_in_a_row(client: httpclient.InferenceServerClient) -> None:
    """Binary bodies of 256 KiB and more (the server reads each into a buffer of its own) one
    after another on tritonclient's keep-alive connection, then a small request: each answer
    is its own request's tensor."""
    rng = rng_for("large-binary")
    for elements in (1 << 18, 3 << 18, 1 << 16):  # 1 MiB, 3 MiB, 256 KiB of FP32
        data = rng.standard_normal((2, elements // 2)).astype(np.float32)
        result = client.infer(
            "identity_fp32",
            [make_input("INPUT0", data, "FP32", True)],
            outputs=want(["OUTPUT0"], True),
        )
        assert_encoding(result, "OUTPUT0", True)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    assert_still_serving(client)


# -- request parameters and model errors -------------------------------------------------------


@pytest.mark.parametrize("binary", MODES)
def test_parameters_reach_model(client: httpclient.InferenceServerClient, binary: bool) -> None:
    params = {"alpha": "a string", "beta": 7, "gamma": True, "delta": -1.25, "unicode": "\u00e9"}
    x = np.array([1, -5, 2**31 - 2], dtype=np.int32)
    for outputs in (want(["OUTPUT0", "PARAMS"], binary), None):
        result = client.infer(
            "params_async",
            [make_input("INPUT0", x, "INT32", binary)],
            outputs=outputs,
            parameters=params,
        )
        assert result.as_numpy("OUTPUT0").tolist() == (x + 1).tolist()
        (reported,) = as_bytes_list(result.as_numpy("PARAMS"))
        assert json.loads(reported) == params


@pytest.mark.parametrize("binary", MODES)
def test_model_value_error_is_400(client: httpclient.InferenceServerClient, binary: bool) -> None:
    inputs = [make_input("INPUT0", np.array([1, 2], dtype=np.int32), "INT32", binary)]
    expect_error(
        lambda: client.infer("params_async", inputs, parameters={"fail": "value"}),
        "400",
        "parameter 'fail' asked for a ValueError",
    )
    assert_still_serving(client)


@pytest.mark.parametrize("binary", MODES)
def test_model_exception_is_500(client: httpclient.InferenceServerClient, binary: bool) -> None:
    inputs = [make_input("INPUT0", np.array([1, 2], dtype=np.int32), "INT32", binary)]
    expect_error(
        lambda: client.infer("params_async", inputs, parameters={"fail": "crash"}),
        "500",
        "parameter 'fail' asked for a crash",
    )
    assert_still_serving(client)
    # and the same model still answers
    result = client.infer("params_async", inputs, parameters={"fail": "no"})
    assert result.as_numpy("OUTPUT0").tolist() == [2, 3]


@pytest.mark.parametrize("binary", MODES)
def test_streaming_model_refuses_unary_infer(
    client: httpclient.InferenceServerClient, binary: bool
) -> None:
    inputs = [make_input("INPUT0", np.array([1, 2, 3], dtype=np.int32), "INT32", binary)]
    exc = expect_error(lambda: client.infer("stream_python", inputs), "400")
    assert "stream" in exc.message().lower()
    assert_still_serving(client)


@pytest.mark.parametrize("binary", MODES)
def test_bad_requests_leave_server_serving(
    client: httpclient.InferenceServerClient, binary: bool
) -> None:
    good = np.zeros((2, 4), dtype=np.float32)
    cases: list[tuple[str, list[Any], Any, str, tuple[str, ...]]] = [
        # model, inputs, outputs, status, message fragments
        ("mlp_onnx", [make_input("INPUT0", good.astype(np.float64), "FP64", binary)], None, "400",
         ("FP64", "FP32")),
        ("mlp_onnx", [make_input("INPUT0", np.zeros((2, 5), np.float32), "FP32", binary)], None,
         "400", ("shape",)),
        ("mlp_onnx", [make_input("WRONG", good, "FP32", binary)], None, "400", ("WRONG",)),
        ("mlp_onnx", [make_input("INPUT0", good, "FP32", binary)], want(["NOPE"], binary), "400",
         ("NOPE",)),
        ("mlp_onnx", [], None, "400", ("INPUT0",)),
        ("versioned_python", [make_input("INPUT0", np.zeros((9, 1), np.float32), "FP32", binary)],
         None, "400", ("batch",)),
        ("text_python", [make_input("TEXT", np.array([1, 2], np.int64), "INT64", binary)], None,
         "400", ("BYTES",)),
    ]  # fmt: skip
    for model, inputs, outputs, status, fragments in cases:
        expect_error(partial(client.infer, model, inputs, outputs=outputs), status, *fragments)
        assert client.is_server_live()
    with pytest.raises(InferenceServerException) as info:
        client.infer("no_such_model", [make_input("INPUT0", good, "FP32", binary)])
    assert info.value.status() in ("400", "404")
    assert "no_such_model" in info.value.message()
    assert_still_serving(client)
