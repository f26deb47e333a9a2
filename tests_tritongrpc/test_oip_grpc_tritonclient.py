"""The real server's gRPC endpoint (inference.GRPCInferenceService) driven by ``tritonclient.grpc``.

Expected values are computed independently of the server: the MLP with onnxruntime on the
repository's ONNX file, the iris classifier with joblib on the repository's pickle, the Python
test models by re-stating what their ``predict`` does.

Runs in its own pytest process (``pytest tests_tritongrpc``): see conftest.py.
"""

from __future__ import annotations

import json
import queue
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests import v2data
from tests.serverproc import ServerProcess, start_server, stop_cleanly
from tests.tritonclient_common import expect_error
from tests.v2data import (
    DATATYPES,
    MODEL_SIGNATURES,
    NUMPY_TYPES,
    Tensor,
    as_bytes_list,
    assert_same,
    rng_for,
)

STREAM_WAIT_S = 60.0  # a hang guard for stream responses, not a timing assertion


# -- fixtures and helpers (local to this module) ---------------------------------------------


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    c = grpcclient.InferenceServerClient(server.grpc_address)
    yield c
    c.close()


def make_input(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    inp = grpcclient.InferInput(name, list(array.shape), datatype)
    inp.set_data_from_numpy(array)
    return inp


def want(*names: str) -> list[grpcclient.InferRequestedOutput]:
    return [grpcclient.InferRequestedOutput(n) for n in names]


def output_names(result: grpcclient.InferResult) -> list[str]:
    return [o.name for o in result.get_response().outputs]


def sample(dtype: str) -> np.ndarray:
    """gRPC always carries raw bytes: NaN, infinities and non-UTF-8 BYTES too."""
    return v2data.sample(dtype, "grpc")


def assert_still_serving(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live() is True
    assert client.is_server_ready() is True
    x = np.array([[1.5, -2.0]], dtype=np.float32)
    result = client.infer("versioned_python", [make_input("INPUT0", x, "FP32")], "1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)


def int32_input(values: list[int]) -> grpcclient.InferInput:
    return make_input("INPUT0", np.array(values, dtype=np.int32), "INT32")


def params_of(result: grpcclient.InferResult) -> dict[str, Any]:
    """params_async reports the request parameters it received as JSON in PARAMS."""
    raw = result.as_numpy("PARAMS")
    assert raw is not None
    assert raw.shape == (1,)
    doc: dict[str, Any] = json.loads(raw[0])
    return doc


# -- health and metadata -----------------------------------------------------------------------


def test_server_live_and_ready(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live() is True
    assert client.is_server_ready() is True


def test_model_ready(client: grpcclient.InferenceServerClient) -> None:
    for model in ("mlp_onnx", "iris_sklearn", "text_python", "params_async", "stream_python"):
        assert client.is_model_ready(model) is True, model
    assert client.is_model_ready("versioned_python") is True
    assert client.is_model_ready("versioned_python", "1") is True
    assert client.is_model_ready("versioned_python", "2") is True
    expect_error(lambda: client.is_model_ready("no_such_model"), "StatusCode.NOT_FOUND", "no_such")
    expect_error(
        lambda: client.is_model_ready("versioned_python", "9"), "StatusCode.NOT_FOUND", "9"
    )


def test_server_metadata(client: grpcclient.InferenceServerClient) -> None:
    meta = client.get_server_metadata()
    assert meta.name == "rosettaserve"
    assert meta.version == dist_version("rosettaserve")
    extensions = list(meta.extensions)
    for ext in ("model_configuration", "statistics", "binary_tensor_data"):
        assert ext in extensions, extensions
    assert len(set(extensions)) == len(extensions), extensions
    # the default server has no model control, so it must not claim the extension
    assert "model_repository" not in extensions
    as_json = client.get_server_metadata(as_json=True)
    assert as_json["name"] == "rosettaserve"
    assert as_json["extensions"] == extensions


def _tensors(items: Any) -> list[Tensor]:
    return [(t.name, t.datatype, list(t.shape)) for t in items]


@pytest.mark.parametrize("model", sorted(MODEL_SIGNATURES))
def test_model_metadata(client: grpcclient.InferenceServerClient, model: str) -> None:
    versions, inputs, outputs = MODEL_SIGNATURES[model]
    meta = client.get_model_metadata(model)
    assert meta.name == model
    assert sorted(meta.versions) == versions
    assert meta.platform
    assert _tensors(meta.inputs) == inputs
    assert _tensors(meta.outputs) == outputs
    as_json = client.get_model_metadata(model, as_json=True)
    assert as_json["name"] == model
    assert [i["name"] for i in as_json["inputs"]] == [i[0] for i in inputs]


def test_model_metadata_versions(client: grpcclient.InferenceServerClient) -> None:
    for version in ("1", "2"):
        meta = client.get_model_metadata("versioned_python", version)
        assert meta.name == "versioned_python"
        assert _tensors(meta.inputs) == [("INPUT0", "FP32", [-1, -1])]
    expect_error(lambda: client.get_model_metadata("versioned_python", "3"), "StatusCode.NOT_FOUND")
    expect_error(lambda: client.get_model_metadata("no_such_model"), "StatusCode.NOT_FOUND")


def test_mlp_signature_matches_onnx_graph(
    client: grpcclient.InferenceServerClient, mlp_session: ort.InferenceSession
) -> None:
    """The server read its signature from the graph: cross-check with onnxruntime."""
    meta = client.get_model_metadata("mlp_onnx")
    graph_in = mlp_session.get_inputs()
    graph_out = mlp_session.get_outputs()
    assert [t.name for t in meta.inputs] == [t.name for t in graph_in]
    assert [t.name for t in meta.outputs] == [t.name for t in graph_out]
    for served, graph in zip(meta.inputs, graph_in, strict=True):
        assert list(served.shape) == [d if isinstance(d, int) else -1 for d in graph.shape]
    for served, graph in zip(meta.outputs, graph_out, strict=True):
        assert list(served.shape) == [d if isinstance(d, int) else -1 for d in graph.shape]


CONFIG_TYPES = {d: f"TYPE_{d}" for d in DATATYPES} | {"BYTES": "TYPE_STRING"}


def _config_tensors(items: Any) -> list[Tensor]:
    from tritonclient.grpc import model_config_pb2

    return [(t.name, model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in items]


def test_model_config_batching_model(client: grpcclient.InferenceServerClient) -> None:
    """max_batch_size 8 (model.yaml): dims leave out the batch dimension."""
    config = client.get_model_config("versioned_python").config
    assert config.name == "versioned_python"
    assert config.max_batch_size == 8
    assert _config_tensors(config.input) == [("INPUT0", "TYPE_FP32", [-1])]
    assert _config_tensors(config.output) == [("OUTPUT0", "TYPE_FP32", [-1])]
    for version in ("1", "2"):
        assert client.get_model_config("versioned_python", version).config.max_batch_size == 8
    as_json = client.get_model_config("versioned_python", as_json=True)
    assert as_json["config"]["max_batch_size"] == 8
    assert as_json["config"]["input"][0]["data_type"] == "TYPE_FP32"


def test_model_config_non_batching_models(client: grpcclient.InferenceServerClient) -> None:
    mlp = client.get_model_config("mlp_onnx").config
    assert mlp.max_batch_size == 0
    assert _config_tensors(mlp.input) == [("INPUT0", "TYPE_FP32", [-1, 4])]
    assert _config_tensors(mlp.output) == [("OUTPUT0", "TYPE_FP32", [-1, 3])]
    text = client.get_model_config("text_python").config
    assert text.max_batch_size == 0
    assert _config_tensors(text.input) == [("TEXT", "TYPE_STRING", [-1])]
    assert _config_tensors(text.output) == [
        ("UPPER", "TYPE_STRING", [-1]),
        ("LENGTH", "TYPE_INT64", [-1]),
    ]
    assert not text.model_transaction_policy.decoupled
    stream = client.get_model_config("stream_python").config
    assert stream.model_transaction_policy.decoupled is True


@pytest.mark.parametrize("model", sorted(MODEL_SIGNATURES))
def test_model_config_agrees_with_metadata(
    client: grpcclient.InferenceServerClient, model: str
) -> None:
    config = client.get_model_config(model).config
    meta = client.get_model_metadata(model)
    assert config.name == model
    batch = config.max_batch_size

    def expected(items: Any) -> list[Tensor]:
        return [
            (t.name, CONFIG_TYPES[t.datatype], list(t.shape)[1:] if batch > 0 else list(t.shape))
            for t in items
        ]

    assert _config_tensors(config.input) == expected(meta.inputs)
    assert _config_tensors(config.output) == expected(meta.outputs)


@pytest.mark.parametrize("dtype", DATATYPES)
def test_model_config_data_types(client: grpcclient.InferenceServerClient, dtype: str) -> None:
    config = client.get_model_config(f"identity_{dtype.lower()}").config
    assert _config_tensors(config.input)[0][1] == CONFIG_TYPES[dtype]
    assert _config_tensors(config.output)[0][1] == CONFIG_TYPES[dtype]


def test_model_config_unknown(client: grpcclient.InferenceServerClient) -> None:
    expect_error(lambda: client.get_model_config("no_such_model"), "StatusCode.NOT_FOUND")
    expect_error(lambda: client.get_model_config("versioned_python", "5"), "StatusCode.NOT_FOUND")


# -- statistics --------------------------------------------------------------------------------


def _stat(client: grpcclient.InferenceServerClient, model: str, version: str) -> Any:
    stats = client.get_inference_statistics(model, version).model_stats
    assert [(s.name, s.version) for s in stats] == [(model, version)]
    return stats[0]


def _batch_count(stat: Any, size: int) -> int:
    return sum(b.compute_infer.count for b in stat.batch_stats if b.batch_size == size)


def test_statistics_count_inferences(client: grpcclient.InferenceServerClient) -> None:
    before = _stat(client, "versioned_python", "1")
    other_before = _stat(client, "versioned_python", "2")
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    for _ in range(2):
        result = client.infer("versioned_python", [make_input("INPUT0", x, "FP32")], "1")
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
    bad = make_input("INPUT0", x.astype(np.float64), "FP64")
    expect_error(
        lambda: client.infer("versioned_python", [bad], "1"), "StatusCode.INVALID_ARGUMENT"
    )
    after = _stat(client, "versioned_python", "1")

    # batch of 3 rows on a batching model: 2 executions, 6 inferences
    assert after.execution_count == before.execution_count + 2
    assert after.inference_count == before.inference_count + 6
    ok, ok0 = after.inference_stats.success, before.inference_stats.success
    assert ok.count == ok0.count + 2
    assert ok.ns > ok0.ns
    assert after.inference_stats.fail.count == before.inference_stats.fail.count + 1
    infer, infer0 = after.inference_stats.compute_infer, before.inference_stats.compute_infer
    assert infer.count == infer0.count + 2
    assert infer.ns > infer0.ns
    assert _batch_count(after, 3) == _batch_count(before, 3) + 2
    assert after.last_inference > 0
    assert after.last_inference >= before.last_inference

    # the other version saw none of it
    other_after = _stat(client, "versioned_python", "2")
    assert other_after.inference_count == other_before.inference_count
    assert other_after.execution_count == other_before.execution_count


def test_statistics_non_batching_model(client: grpcclient.InferenceServerClient) -> None:
    before = _stat(client, "text_python", "1")
    text = np.array([b"a", b"b", b"c", b"d"], dtype=object)
    client.infer("text_python", [make_input("TEXT", text, "BYTES")])
    after = _stat(client, "text_python", "1")
    # no batching: one request is one inference whatever its first dimension
    assert after.execution_count == before.execution_count + 1
    assert after.inference_count == before.inference_count + 1
    assert after.inference_stats.success.count == before.inference_stats.success.count + 1


def test_statistics_selection(client: grpcclient.InferenceServerClient, repo: Path) -> None:
    every = client.get_inference_statistics().model_stats
    names = sorted({s.name for s in every})
    assert names == sorted(p.name for p in repo.iterdir() if p.is_dir())
    assert sorted(s.version for s in every if s.name == "versioned_python") == ["1", "2"]
    both = client.get_inference_statistics("versioned_python").model_stats
    assert sorted((s.name, s.version) for s in both) == [
        ("versioned_python", "1"),
        ("versioned_python", "2"),
    ]
    as_json = client.get_inference_statistics("mlp_onnx", as_json=True)
    assert [s["name"] for s in as_json["model_stats"]] == ["mlp_onnx"]
    expect_error(lambda: client.get_inference_statistics("no_such_model"), "StatusCode.NOT_FOUND")
    expect_error(
        lambda: client.get_inference_statistics("versioned_python", "4"), "StatusCode.NOT_FOUND"
    )


# -- inference on the example models ---------------------------------------------------------


def test_infer_mlp_onnx(
    client: grpcclient.InferenceServerClient, mlp_session: ort.InferenceSession
) -> None:
    x = rng_for("mlp").standard_normal((5, 4)).astype(np.float32)
    (expected,) = mlp_session.run(None, {"INPUT0": x})
    result = client.infer("mlp_onnx", [make_input("INPUT0", x, "FP32")])
    response = result.get_response()
    assert response.model_name == "mlp_onnx"
    assert response.model_version == "1"
    assert _tensors(response.outputs) == [("OUTPUT0", "FP32", [5, 3])]
    got = result.as_numpy("OUTPUT0")
    assert got is not None
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_infer_mlp_onnx_gzip(
    client: grpcclient.InferenceServerClient, mlp_session: ort.InferenceSession
) -> None:
    x = rng_for("mlp-gzip").standard_normal((3, 4)).astype(np.float32)
    (expected,) = mlp_session.run(None, {"INPUT0": x})
    result = client.infer(
        "mlp_onnx", [make_input("INPUT0", x, "FP32")], compression_algorithm="gzip"
    )
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), expected, rtol=1e-6, atol=1e-6)


def test_infer_iris_sklearn(client: grpcclient.InferenceServerClient, iris: Any) -> None:
    x = np.array(
        [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3], [5.9, 3.0, 4.2, 1.5], [6.3, 2.8, 5.1, 1.5]],
        dtype=np.float64,
    )
    result = client.infer("iris_sklearn", [make_input("input", x, "FP64")])
    assert output_names(result) == ["predict", "predict_proba"]
    labels = result.as_numpy("predict")
    assert labels is not None
    assert labels.shape == (4,)
    assert as_bytes_list(labels) == [str(c).encode() for c in iris.predict(x)]
    proba = result.as_numpy("predict_proba")
    assert proba is not None
    assert proba.dtype == np.float64
    np.testing.assert_allclose(proba, iris.predict_proba(x), rtol=1e-12, atol=1e-12)


def test_infer_text_python(client: grpcclient.InferenceServerClient) -> None:
    words = ["hello", "", "gr\u00fc\u00dfe", "a\x00b", "\u00e9t\u00e9 2026"]
    text = np.array([w.encode() for w in words], dtype=object)
    result = client.infer("text_python", [make_input("TEXT", text, "BYTES")])
    upper = result.as_numpy("UPPER")
    assert upper is not None
    assert as_bytes_list(upper) == [w.upper().encode() for w in words]
    lengths = result.as_numpy("LENGTH")
    assert lengths is not None
    assert lengths.dtype == np.int64
    assert lengths.tolist() == [len(w.encode()) for w in words]


def test_infer_versions(client: grpcclient.InferenceServerClient) -> None:
    x = np.array([[1.0, -2.5, 3.25], [0.0, 4.0, -0.5]], dtype=np.float32)
    inputs = [make_input("INPUT0", x, "FP32")]
    v1 = client.infer("versioned_python", inputs, "1")
    assert v1.get_response().model_version == "1"
    np.testing.assert_array_equal(v1.as_numpy("OUTPUT0"), x)
    v2 = client.infer("versioned_python", inputs, "2")
    assert v2.get_response().model_version == "2"
    np.testing.assert_array_equal(v2.as_numpy("OUTPUT0"), x * np.float32(2.0))
    latest = client.infer("versioned_python", inputs)
    assert latest.get_response().model_version == "2"
    np.testing.assert_array_equal(latest.as_numpy("OUTPUT0"), x * np.float32(2.0))
    expect_error(lambda: client.infer("versioned_python", inputs, "7"), "StatusCode.NOT_FOUND", "7")


def test_async_infer_concurrent(client: grpcclient.InferenceServerClient) -> None:
    """Overlapping requests (async_infer) each get their own answer, matched by request id;
    a few slow ones are mixed in so that requests really are in flight together."""
    replies: queue.Queue[tuple[Any, Any]] = queue.Queue()

    def put(result: Any, error: Any) -> None:
        replies.put((result, error))

    fast: dict[str, np.ndarray] = {f"fast{i}": np.full((1, 3), i, np.float32) for i in range(10)}
    slow: dict[str, np.ndarray] = {f"slow{i}": np.full((2,), -i, np.float32) for i in range(3)}
    for rid, x in slow.items():
        inputs = [make_input("INPUT0", x, "FP32")]
        params = {"sleep": 0.2}
        client.async_infer("slow_python", inputs, put, request_id=rid, parameters=params)
    for rid, x in fast.items():
        client.async_infer("identity_fp32", [make_input("INPUT0", x, "FP32")], put, request_id=rid)
    got = {}
    for _ in range(len(fast) + len(slow)):
        result, error = replies.get(timeout=STREAM_WAIT_S)
        assert error is None, error
        got[result.get_response().id] = result.as_numpy("OUTPUT0")
    sent = fast | slow
    assert sorted(got) == sorted(sent)
    for rid, x in sent.items():
        assert_same(got[rid], x, "FP32")


def test_infer_batch_limit(client: grpcclient.InferenceServerClient) -> None:
    x = np.ones((9, 2), dtype=np.float32)  # max_batch_size is 8
    expect_error(
        lambda: client.infer("versioned_python", [make_input("INPUT0", x, "FP32")], "1"),
        "StatusCode.INVALID_ARGUMENT",
        "8",
    )
    x8 = np.ones((8, 2), dtype=np.float32)
    result = client.infer("versioned_python", [make_input("INPUT0", x8, "FP32")], "1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x8)


def test_infer_slow_python_float_parameter(client: grpcclient.InferenceServerClient) -> None:
    x = np.array([0.5, -1.5, 2.0], dtype=np.float32)
    result = client.infer(
        "slow_python", [make_input("INPUT0", x, "FP32")], parameters={"sleep": 0.01}
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)


def test_streaming_model_refuses_unary_infer(client: grpcclient.InferenceServerClient) -> None:
    expect_error(
        lambda: client.infer("stream_python", [int32_input([1, 2])]),
        "StatusCode.INVALID_ARGUMENT",
        "stream",
    )
    assert_still_serving(client)


# -- datatypes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DATATYPES)
def test_identity_roundtrip(client: grpcclient.InferenceServerClient, dtype: str) -> None:
    x = sample(dtype)
    model = f"identity_{dtype.lower()}"
    result = client.infer(model, [make_input("INPUT0", x, dtype)])
    response = result.get_response()
    assert response.model_name == model
    assert _tensors(response.outputs) == [("OUTPUT0", dtype, [2, 4])]
    assert_same(result.as_numpy("OUTPUT0"), x, dtype)


@pytest.mark.parametrize("shape", [(0, 3), (2, 0), (0, 0)], ids=["0x3", "2x0", "0x0"])
@pytest.mark.parametrize("dtype", DATATYPES)
def test_identity_empty_tensors(
    client: grpcclient.InferenceServerClient, dtype: str, shape: tuple[int, int]
) -> None:
    x = np.empty(shape, dtype=NUMPY_TYPES[dtype])
    result = client.infer(f"identity_{dtype.lower()}", [make_input("INPUT0", x, dtype)])
    assert _tensors(result.get_response().outputs) == [("OUTPUT0", dtype, list(shape))]
    assert_same(result.as_numpy("OUTPUT0"), x, dtype)


def test_bytes_nul_and_empty(client: grpcclient.InferenceServerClient) -> None:
    items = [b"", b"\x00", b"\x00\x00\x00", b"nul\x00inside", b"", b"\xff" * 300, b"x" * 70000]
    x = np.array(items, dtype=object).reshape(1, -1)
    result = client.infer("identity_bytes", [make_input("INPUT0", x, "BYTES")])
    got = result.as_numpy("OUTPUT0")
    assert got is not None
    assert got.shape == (1, len(items))
    assert as_bytes_list(got) == items


@pytest.mark.parametrize("dtype", ["INT64", "UINT64"])
def test_int64_uint64_extremes(client: grpcclient.InferenceServerClient, dtype: str) -> None:
    np_type = NUMPY_TYPES[dtype]
    info = np.iinfo(np_type)
    values = [info.min, info.max, info.max - 1, info.min + 1, 0, 2**53 + 1]
    x = np.array([values], dtype=np_type)
    result = client.infer(f"identity_{dtype.lower()}", [make_input("INPUT0", x, dtype)])
    got = result.as_numpy("OUTPUT0")
    assert got is not None
    assert got.dtype == np_type
    assert [int(v) for v in got.ravel()] == [int(v) for v in values]


# -- request fields: id, outputs, parameters ---------------------------------------------------


def test_request_id_echo(client: grpcclient.InferenceServerClient) -> None:
    x = np.array([[1.0]], dtype=np.float32)
    inputs = [make_input("INPUT0", x, "FP32")]
    for request_id in ("req-42", "\u00fcn\u00efc\u00f6de id", "x" * 200):
        result = client.infer("identity_fp32", inputs, request_id=request_id)
        assert result.get_response().id == request_id
    assert client.infer("identity_fp32", inputs).get_response().id == ""


def test_outputs_filter(client: grpcclient.InferenceServerClient, iris: Any) -> None:
    x = np.array([[6.1, 2.8, 4.7, 1.2], [7.7, 3.8, 6.7, 2.2]], dtype=np.float64)
    inputs = [make_input("input", x, "FP64")]
    only_proba = client.infer("iris_sklearn", inputs, outputs=want("predict_proba"))
    assert output_names(only_proba) == ["predict_proba"]
    assert only_proba.as_numpy("predict") is None
    np.testing.assert_allclose(only_proba.as_numpy("predict_proba"), iris.predict_proba(x))
    only_label = client.infer("iris_sklearn", inputs, outputs=want("predict"))
    assert output_names(only_label) == ["predict"]
    assert as_bytes_list(only_label.as_numpy("predict")) == [
        str(c).encode() for c in iris.predict(x)
    ]
    text = np.array([b"ab", b"cde"], dtype=object)
    reordered = client.infer(
        "text_python", [make_input("TEXT", text, "BYTES")], outputs=want("LENGTH", "UPPER")
    )
    assert output_names(reordered) == ["LENGTH", "UPPER"]
    assert reordered.as_numpy("LENGTH").tolist() == [2, 3]
    assert as_bytes_list(reordered.as_numpy("UPPER")) == [b"AB", b"CDE"]
    expect_error(
        lambda: client.infer("iris_sklearn", inputs, outputs=want("nope")),
        "StatusCode.INVALID_ARGUMENT",
        "nope",
    )


def test_custom_parameters_of_every_type(client: grpcclient.InferenceServerClient) -> None:
    sent: dict[str, Any] = {
        "text": "h\u00e9llo",
        "empty": "",
        "count": -7,
        "big": 2**62 + 3,
        "ratio": 0.125,
        "neg": -1.5e300,
        "yes": True,
        "no": False,
    }
    result = client.infer("params_async", [int32_input([4, 5])], parameters=sent)
    got = params_of(result)
    assert got == sent
    # float stays float (double_param), bool stays bool
    assert isinstance(got["ratio"], float)
    assert got["yes"] is True
    assert got["no"] is False
    assert isinstance(got["count"], int)
    assert not isinstance(got["count"], bool)
    assert result.as_numpy("OUTPUT0").tolist() == [5, 6]


def test_priority_and_timeout_accepted(client: grpcclient.InferenceServerClient) -> None:
    # tritonclient sends priority as uint64_param and timeout as int64_param
    for priority in (3, 2**63 + 5):
        result = client.infer("params_async", [int32_input([1])], priority=priority, timeout=250000)
        assert result.as_numpy("OUTPUT0").tolist() == [2]
        got = params_of(result)
        assert got.get("priority") == priority
        assert got.get("timeout") == 250000


def test_parameters_reach_model_through_stream(
    server: ServerProcess, client: grpcclient.InferenceServerClient
) -> None:
    with stream(server) as s:
        s.client.async_stream_infer(
            "params_async", [int32_input([9])], request_id="p", parameters={"f": 2.5, "b": True}
        )
        (result,) = s.results(1)
    got = params_of(result)
    assert got["f"] == 2.5
    assert got["b"] is True


# -- errors ----------------------------------------------------------------------------------


def test_model_value_error_is_invalid_argument(client: grpcclient.InferenceServerClient) -> None:
    expect_error(
        lambda: client.infer("params_async", [int32_input([1])], parameters={"fail": "value"}),
        "StatusCode.INVALID_ARGUMENT",
        "parameter 'fail' asked for a ValueError",
    )
    assert_still_serving(client)


def test_model_crash_is_internal(client: grpcclient.InferenceServerClient) -> None:
    expect_error(
        lambda: client.infer("params_async", [int32_input([1])], parameters={"fail": "crash"}),
        "StatusCode.INTERNAL",
        "RuntimeError",
        "parameter 'fail' asked for a crash",
    )
    assert_still_serving(client)


def test_unknown_model_is_not_found(client: grpcclient.InferenceServerClient) -> None:
    x = np.array([[1.0]], dtype=np.float32)
    expect_error(
        lambda: client.infer("no_such_model", [make_input("INPUT0", x, "FP32")]),
        "StatusCode.NOT_FOUND",
        "no_such_model",
    )
    assert_still_serving(client)


def test_bad_inputs_are_invalid_argument(client: grpcclient.InferenceServerClient) -> None:
    x = np.array([[1.0, 2.0]], dtype=np.float32)
    expect_error(
        lambda: client.infer("mlp_onnx", [make_input("INPUT0", x.astype(np.float64), "FP64")]),
        "StatusCode.INVALID_ARGUMENT",
        "FP64",
    )
    expect_error(
        lambda: client.infer("mlp_onnx", [make_input("INPUT0", x, "FP32")]),  # 2 features, not 4
        "StatusCode.INVALID_ARGUMENT",
        "shape",
    )
    expect_error(
        lambda: client.infer("mlp_onnx", [make_input("WRONG", x, "FP32")]),
        "StatusCode.INVALID_ARGUMENT",
        "WRONG",
    )
    assert_still_serving(client)


# -- streaming (ModelStreamInfer) --------------------------------------------------------------


@dataclass
class Stream:
    client: grpcclient.InferenceServerClient
    replies: queue.Queue[tuple[Any, Any]]

    def next(self) -> tuple[grpcclient.InferResult | None, InferenceServerException | None]:
        return self.replies.get(timeout=STREAM_WAIT_S)

    def results(self, n: int) -> list[grpcclient.InferResult]:
        out = []
        for _ in range(n):
            result, error = self.next()
            assert error is None, error
            assert result is not None
            out.append(result)
        return out


@contextmanager
def stream(server: ServerProcess) -> Iterator[Stream]:
    """A fresh client with one open stream; closed (and the stream drained) on exit."""
    replies: queue.Queue[tuple[Any, Any]] = queue.Queue()
    c = grpcclient.InferenceServerClient(server.grpc_address)
    c.start_stream(callback=lambda result, error: replies.put((result, error)))
    try:
        yield Stream(c, replies)
    finally:
        c.stop_stream()
        c.close()


def drain(s: Stream) -> list[tuple[Any, Any]]:
    """Everything that arrived; call after stop_stream, which waits for the stream to end."""
    s.client.stop_stream()
    items = []
    while True:
        try:
            items.append(s.replies.get_nowait())
        except queue.Empty:
            return items


def final_flag(result: grpcclient.InferResult) -> bool | None:
    params = result.get_response().parameters
    if "triton_final_response" not in params:
        return None
    param = params["triton_final_response"]
    assert param.WhichOneof("parameter_choice") == "bool_param", param
    return bool(param.bool_param)


def test_stream_several_requests(
    server: ServerProcess, client: grpcclient.InferenceServerClient
) -> None:
    with stream(server) as s:
        sent = {}
        for i, dtype in enumerate(["INT32", "FP64", "BYTES", "BF16"]):
            x = sample(dtype)
            sent[f"r{i}"] = (dtype, x)
            s.client.async_stream_infer(
                f"identity_{dtype.lower()}", [make_input("INPUT0", x, dtype)], request_id=f"r{i}"
            )
        s.client.async_stream_infer("params_async", [int32_input([10, 20])], request_id="p")
        items = drain(s)
    assert [e for _, e in items] == [None] * 5
    by_id = {r.get_response().id: r for r, _ in items}
    assert sorted(by_id) == ["p", "r0", "r1", "r2", "r3"]
    for rid, (dtype, x) in sent.items():
        assert_same(by_id[rid].as_numpy("OUTPUT0"), x, dtype)
    assert by_id["p"].as_numpy("OUTPUT0").tolist() == [11, 21]


def test_stream_in_band_errors_keep_stream_open(
    server: ServerProcess, client: grpcclient.InferenceServerClient
) -> None:
    x = np.array([[2.0, 3.0]], dtype=np.float32)
    with stream(server) as s:
        s.client.async_stream_infer(
            "identity_fp32", [make_input("INPUT0", x, "FP32")], request_id="a"
        )
        (first,) = s.results(1)
        assert first.get_response().id == "a"

        s.client.async_stream_infer("no_such_model", [make_input("INPUT0", x, "FP32")])
        result, error = s.next()
        assert result is None
        assert isinstance(error, InferenceServerException)
        assert "no_such_model" in (error.message() or "")

        s.client.async_stream_infer(
            "params_async", [int32_input([1])], parameters={"fail": "value"}
        )
        result, error = s.next()
        assert result is None
        assert error is not None
        assert "asked for a ValueError" in (error.message() or "")

        s.client.async_stream_infer(
            "params_async", [int32_input([1])], parameters={"fail": "crash"}
        )
        result, error = s.next()
        assert result is None
        assert error is not None
        assert "asked for a crash" in (error.message() or "")

        # the same stream still answers
        s.client.async_stream_infer(
            "identity_fp32", [make_input("INPUT0", x * 2, "FP32")], request_id="b"
        )
        (after,) = s.results(1)
        assert after.get_response().id == "b"
        np.testing.assert_array_equal(after.as_numpy("OUTPUT0"), x * 2)
        assert drain(s) == []
    assert_still_serving(client)


def test_stream_decoupled_model_yields_n_responses(
    server: ServerProcess, client: grpcclient.InferenceServerClient
) -> None:
    values = [5, -3, 0, 2**31 - 1, -(2**31), 42]
    before = _stat(client, "stream_python", "1")
    with stream(server) as s:
        s.client.async_stream_infer("stream_python", [int32_input(values)], request_id="gen")
        items = drain(s)
    after = _stat(client, "stream_python", "1")
    # one request, one execution, however many responses it streamed
    assert after.execution_count == before.execution_count + 1
    assert after.inference_stats.success.count == before.inference_stats.success.count + 1
    assert [e for _, e in items] == [None] * len(values)
    results = [r for r, _ in items]
    assert [r.get_response().id for r in results] == ["gen"] * len(values)
    for result in results:
        assert _tensors(result.get_response().outputs) == [("OUTPUT0", "INT32", [1])]
    assert [int(r.as_numpy("OUTPUT0")[0]) for r in results] == values


def test_stream_decoupled_model_empty_input(
    server: ServerProcess, client: grpcclient.InferenceServerClient
) -> None:
    """Zero elements: zero data responses, then only the empty final response."""
    with stream(server) as s:
        s.client.async_stream_infer(
            "stream_python", [int32_input([])], request_id="none", enable_empty_final_response=True
        )
        items = drain(s)
    assert len(items) == 1
    (result, error) = items[0]
    assert error is None
    assert result.get_response().outputs == []
    assert final_flag(result) is True


def test_stream_empty_final_response_decoupled(
    server: ServerProcess, client: grpcclient.InferenceServerClient
) -> None:
    values = [7, 8, 9]
    with stream(server) as s:
        s.client.async_stream_infer(
            "stream_python",
            [int32_input(values)],
            request_id="d",
            enable_empty_final_response=True,
        )
        items = drain(s)
    assert [e for _, e in items] == [None] * (len(values) + 1)
    results = [r for r, _ in items]
    data, final = results[:-1], results[-1]
    assert [final_flag(r) for r in data] == [False] * len(values)
    assert [int(r.as_numpy("OUTPUT0")[0]) for r in data] == values
    assert final_flag(final) is True
    assert final.get_response().outputs == []
    assert list(final.get_response().raw_output_contents) == []
    assert [r.get_response().id for r in results] == ["d"] * len(results)
    assert {r.get_response().model_name for r in results} == {"stream_python"}


def test_stream_empty_final_response_normal_model(
    server: ServerProcess, client: grpcclient.InferenceServerClient
) -> None:
    x = np.array([[1, -1]], dtype=np.int16)
    with stream(server) as s:
        s.client.async_stream_infer(
            "identity_int16",
            [make_input("INPUT0", x, "INT16")],
            request_id="n",
            enable_empty_final_response=True,
        )
        items = drain(s)
    assert len(items) == 1
    result, error = items[0]
    assert error is None
    assert final_flag(result) is True
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)


def test_stream_cancelled_in_flight(
    server: ServerProcess, client: grpcclient.InferenceServerClient
) -> None:
    """The client walks away from a running request: the server shrugs and keeps serving."""
    x = np.array([4.0], dtype=np.float32)
    with stream(server) as s:
        s.client.async_stream_infer(
            "slow_python", [make_input("INPUT0", x, "FP32")], parameters={"sleep": 1.0}
        )
        s.client.stop_stream(cancel_requests=True)
    assert_still_serving(client)
    result = client.infer("slow_python", [make_input("INPUT0", x, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)


def test_client_deadline_exceeded(client: grpcclient.InferenceServerClient) -> None:
    x = np.array([1.0, 2.0], dtype=np.float32)
    expect_error(
        lambda: client.infer(
            "slow_python",
            [make_input("INPUT0", x, "FP32")],
            parameters={"sleep": 2.0},
            client_timeout=0.2,
        ),
        "StatusCode.DEADLINE_EXCEEDED",
    )
    assert_still_serving(client)


def test_sigterm_with_idle_stream_open(repo: Path) -> None:
    """A client keeps a stream open (as long-lived streaming clients do) but has nothing in
    flight: SIGTERM must still stop the server cleanly. serverproc.stop() waits 30 s before it
    falls back to SIGKILL (exit code -9)."""
    proc = start_server(repo)
    c = grpcclient.InferenceServerClient(proc.grpc_address)
    replies: queue.Queue[tuple[Any, Any]] = queue.Queue()
    try:
        c.start_stream(callback=lambda result, error: replies.put((result, error)))
        c.async_stream_infer("stream_python", [int32_input([1, 2])], request_id="idle")
        for expected in (1, 2):
            result, error = replies.get(timeout=STREAM_WAIT_S)
            assert error is None, error
            assert int(result.as_numpy("OUTPUT0")[0]) == expected
        code = proc.stop()
        assert code == 0, (
            f"exit code {code}: SIGTERM did not stop the server while an idle stream was open; "
            "last log lines:\n" + "\n".join(proc.lines[-3:])
        )
    finally:
        c.stop_stream(cancel_requests=True)
        c.close()
        proc.stop()


# -- message size --------------------------------------------------------------------------------


def test_64mib_tensor_roundtrip(server: ServerProcess) -> None:
    x = rng_for("big").standard_normal((16, 1 << 20), dtype=np.float32)  # 64 MiB
    assert x.nbytes == 64 * 1024 * 1024
    # tritonclient's default channel already allows INT32_MAX; say so explicitly anyway
    big = 2**31 - 1
    c = grpcclient.InferenceServerClient(
        server.grpc_address,
        channel_args=[
            ("grpc.max_send_message_length", big),
            ("grpc.max_receive_message_length", big),
        ],
    )
    try:
        result = c.infer("identity_fp32", [make_input("INPUT0", x, "FP32")])
        got = result.as_numpy("OUTPUT0")
        assert got is not None
        assert got.shape == x.shape
        assert got.tobytes() == x.tobytes()
        assert c.is_server_live() is True
    finally:
        c.close()


# -- model repository extension ----------------------------------------------------------------


def test_model_control_refused_without_flag(client: grpcclient.InferenceServerClient) -> None:
    assert "model_repository" not in client.get_server_metadata().extensions
    expect_error(
        lambda: client.load_model("mlp_onnx"), "StatusCode.PERMISSION_DENIED", "model control"
    )
    expect_error(lambda: client.unload_model("mlp_onnx"), "StatusCode.PERMISSION_DENIED")
    expect_error(client.get_model_repository_index, "StatusCode.PERMISSION_DENIED")
    # the refused unload changed nothing
    assert client.is_model_ready("mlp_onnx") is True
    assert_still_serving(client)


@pytest.fixture(scope="module")
def controlled_repo(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("controlled") / "repo"
    shutil.copytree(repo, dest)
    return dest


@pytest.fixture(scope="module")
def controlled(controlled_repo: Path) -> Iterator[ServerProcess]:
    proc = start_server(controlled_repo, "--enable-model-control")
    try:
        yield proc
    finally:
        stop_cleanly(proc)


@pytest.fixture
def ctl(controlled: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    c = grpcclient.InferenceServerClient(controlled.grpc_address)
    yield c
    c.close()


def model_unready(c: grpcclient.InferenceServerClient, name: str) -> bool:
    """An unloaded model: ModelReady answers false, or NOT_FOUND / UNAVAILABLE (Triton style)."""
    try:
        return c.is_model_ready(name) is False
    except InferenceServerException as exc:
        return exc.status() in ("StatusCode.NOT_FOUND", "StatusCode.UNAVAILABLE")


def _index(c: grpcclient.InferenceServerClient) -> dict[str, list[tuple[str, str]]]:
    rows: dict[str, list[tuple[str, str]]] = {}
    for m in c.get_model_repository_index().models:
        rows.setdefault(m.name, []).append((m.version, m.state))
    return rows


def test_repository_index(ctl: grpcclient.InferenceServerClient, controlled_repo: Path) -> None:
    assert "model_repository" in ctl.get_server_metadata().extensions
    index = _index(ctl)
    assert sorted(index) == sorted(p.name for p in controlled_repo.iterdir() if p.is_dir())
    assert sorted(index["versioned_python"]) == [("1", "READY"), ("2", "READY")]
    for name, rows in index.items():
        assert rows, name
        assert all(state == "READY" for _, state in rows), (name, rows)
    as_json = ctl.get_model_repository_index(as_json=True)
    assert {m["name"] for m in as_json["models"]} == set(index)


def test_unload_then_load(
    ctl: grpcclient.InferenceServerClient, mlp_session: ort.InferenceSession
) -> None:
    x = rng_for("reload").standard_normal((2, 4)).astype(np.float32)
    (expected,) = mlp_session.run(None, {"INPUT0": x})
    inputs = [make_input("INPUT0", x, "FP32")]
    assert ctl.is_model_ready("mlp_onnx") is True

    ctl.unload_model("mlp_onnx")
    assert model_unready(ctl, "mlp_onnx")
    with pytest.raises(InferenceServerException) as info:
        ctl.infer("mlp_onnx", inputs)
    assert info.value.status() in ("StatusCode.NOT_FOUND", "StatusCode.UNAVAILABLE"), info.value
    rows = [m for m in ctl.get_model_repository_index().models if m.name == "mlp_onnx"]
    assert rows
    assert all(m.state != "READY" for m in rows), rows
    # the other models are untouched, and an explicit unload leaves the server ready
    assert ctl.is_model_ready("iris_sklearn") is True
    assert ctl.is_server_ready() is True

    ctl.load_model("mlp_onnx")
    assert ctl.is_model_ready("mlp_onnx") is True
    result = ctl.infer("mlp_onnx", inputs)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), expected, rtol=1e-6, atol=1e-6)
    assert _index(ctl)["mlp_onnx"] == [("1", "READY")]


def test_load_of_a_loaded_model_reloads(ctl: grpcclient.InferenceServerClient) -> None:
    ctl.load_model("text_python")
    assert ctl.is_model_ready("text_python") is True
    result = ctl.infer(
        "text_python", [make_input("TEXT", np.array([b"ok"], dtype=object), "BYTES")]
    )
    assert as_bytes_list(result.as_numpy("UPPER")) == [b"OK"]


@pytest.mark.parametrize("name", ["a/b", "..", "../repo", "mlp_onnx/..", "./mlp_onnx", "x\\y"])
def test_load_rejects_paths(ctl: grpcclient.InferenceServerClient, name: str) -> None:
    expect_error(lambda: ctl.load_model(name), "StatusCode.INVALID_ARGUMENT")
    expect_error(lambda: ctl.unload_model(name), "StatusCode.INVALID_ARGUMENT")
    assert ctl.is_server_live() is True


def test_load_unknown_folder_is_not_found(ctl: grpcclient.InferenceServerClient) -> None:
    expect_error(lambda: ctl.load_model("no_such_folder"), "StatusCode.NOT_FOUND", "no_such")
    expect_error(lambda: ctl.unload_model("no_such_folder"), "StatusCode.NOT_FOUND")
    assert "no_such_folder" not in _index(ctl)
    assert ctl.is_server_live() is True


def test_load_with_config_override_refused(ctl: grpcclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as info:
        ctl.load_model("iris_sklearn", config='{"max_batch_size": 4}')
    assert info.value.status() != "StatusCode.OK"
    assert "config" in (info.value.message() or "")
    assert ctl.is_model_ready("iris_sklearn") is True
    assert ctl.is_server_live() is True


BROKEN_MODEL = """from rosettaserve import Model


class Broken(Model):
    def load(self) -> None:
        raise RuntimeError("broken on purpose")

    def predict(self, inputs):
        return inputs
"""


def test_load_of_a_failing_model(
    ctl: grpcclient.InferenceServerClient, controlled_repo: Path
) -> None:
    """A folder added after start whose model fails to load: an error with the reason."""
    folder = controlled_repo / "broken_python"
    folder.mkdir()
    (folder / "model.py").write_text(BROKEN_MODEL)
    (folder / "model.yaml").write_text("runtime: python\nclass: Broken\n")
    try:
        with pytest.raises(InferenceServerException) as info:
            ctl.load_model("broken_python")
        assert "broken on purpose" in (info.value.message() or ""), info.value
        rows = [m for m in ctl.get_model_repository_index().models if m.name == "broken_python"]
        assert rows
        assert all(m.state != "READY" for m in rows), rows
        assert any("broken on purpose" in m.reason for m in rows), rows
        assert model_unready(ctl, "broken_python")
        assert ctl.is_model_ready("mlp_onnx") is True
        assert ctl.is_server_live() is True
    finally:
        ctl.unload_model("broken_python")
        shutil.rmtree(folder)
    assert "broken_python" not in _index(ctl)
