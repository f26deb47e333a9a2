"""A catalogue of malformed Open Inference Protocol REST requests against a real server.

Each row is sent as raw bytes with exactly the headers given; the server must answer with the
expected status and an ``{"error": ...}`` body whose message holds every expected substring, and
``GET /v2/health/live`` must still answer 200 afterwards.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serverproc import ServerProcess, start_server

MLP = "/v2/models/mlp_onnx/infer"  # INPUT0 FP32[-1, 4] -> OUTPUT0 FP32[-1, 3]
BIN = "application/octet-stream"
TIMEOUT_S = 30.0


def identity(dtype: str) -> str:
    """identity_<dtype>: INPUT0 -> OUTPUT0, shape [-1, -1]."""
    return f"/v2/models/identity_{dtype.lower()}/infer"


def dumps(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def tensor(
    name: str = "INPUT0",
    datatype: str = "FP32",
    shape: Any = (1, 4),
    data: Any = (1.0, 2.0, 3.0, 4.0),
    **extra: Any,
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": name,
        "datatype": datatype,
        "shape": list(shape) if isinstance(shape, tuple) else shape,
    }
    if data is not None:
        doc["data"] = list(data) if isinstance(data, tuple) else data
    doc.update(extra)
    return doc


def request(*inputs: dict[str, Any], **extra: Any) -> bytes:
    return dumps({"inputs": list(inputs), **extra})


def without(doc: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != key}


def binary_input(name: str, datatype: str, shape: Any, size: Any) -> dict[str, Any]:
    return tensor(name, datatype, shape, None, parameters={"binary_data_size": size})


def with_binary(doc: dict[str, Any], blob: bytes, header: str | None = None) -> tuple[dict, bytes]:
    """Headers and body of a binary-extension request; ``header`` overrides the JSON length."""
    head = dumps(doc)
    length = str(len(head)) if header is None else header
    return {"Inference-Header-Content-Length": length, "Content-Type": BIN}, head + blob


def bytes_elements(*items: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def nested(depth: int) -> bytes:
    """An FP32[1, 4] input whose data is one number wrapped in ``depth`` JSON arrays."""
    head = b'{"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": '
    return head + b"[" * depth + b"1.0" + b"]" * depth + b"}]}"


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    message: tuple[str, ...]  # every one must appear in the "error" message


JSON_HEADERS = {"Content-Type": "application/json"}


def case(
    name: str,
    body: bytes | tuple[dict[str, str], bytes],
    status: int,
    *message: str,
    path: str = MLP,
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> Case:
    if isinstance(body, tuple):
        headers, body = body
    return Case(
        name,
        method,
        path,
        dict(JSON_HEADERS if headers is None else headers),
        body,
        status,
        message,
    )


_FP32_4 = (1.0, 2.0, 3.0, 4.0)
_BLOB16 = struct.pack("<4f", *_FP32_4)
_BIG = 2**62
_LARGE = 20_000  # elements: a body over 64 KiB, whose numeric arrays are read in bulk
_MID = 300  # elements: 1.5 KiB of array text, also read in bulk, and a short body
_BULK_FP32 = 1 << 16  # FP32 elements: a 256 KiB binary body, read into a buffer of its own
_BULK_BLOB = struct.pack(f"<{_BULK_FP32}f", *([0.5] * _BULK_FP32))
_BULK_DOC = {"inputs": [binary_input("INPUT0", "FP32", [1, _BULK_FP32], len(_BULK_BLOB))]}


def large(datatype: str, values: list[Any], shape: Any = (1, _LARGE)) -> bytes:
    return request(tensor(datatype=datatype, shape=shape, data=values))


def bulk_read_rows(prefix: str, n: int) -> list[Case]:
    """Bad bodies whose `data` the server reads in bulk (n elements, over 1 KiB of text)."""
    malformed = large("FP32", [0.5] * n, shape=(1, n))[:-3]
    wrong_values: list[tuple[str, str, list[Any], str]] = [  # to the identity model of its type
        ("count_mismatch", "FP32", [0.5] * (n - 1), f"({n} elements)"),
        ("fraction_for_int", "INT32", [1.5] * n, "must hold JSON integers"),
        ("out_of_range", "INT8", [300] * n, "outside the INT8 range"),
        ("beyond_fp32", "FP32", [0.5] * (n - 1) + [1e39], "holds 1e+39, which is outside the FP32"),
        ("boolean_among_numbers", "FP32", [1.0] * (n - 1) + [True], "numbers"),
    ]
    return [case(f"{prefix}_malformed_json", malformed, 400, "not valid JSON")] + [
        case(
            f"{prefix}_{name}",
            large(datatype, values, shape=(1, n)),
            400,
            message,
            path=identity(datatype),
        )
        for name, datatype, values, message in wrong_values
    ]


CASES: list[Case] = [
    # -- the body is not an inference request -------------------------------------------------
    case("malformed_json", b'{"inputs": [', 400, "not valid JSON"),
    case("empty_body", b"", 400, "JSON"),
    case("json_array_not_object", b"[1, 2, 3]", 400, "JSON object"),
    case("json_string_not_object", b'"inputs"', 400, "JSON object"),
    case(  # NaN, Infinity and -Infinity are read (core/json_nonfinite.py); Inf is no token
        "json_inf",
        b'{"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [Inf]}]}',
        400,
        "JSON",
    ),
    case(
        "json_nan_outside_data",
        b'{"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1]}], '
        b'"parameters": {"timeout": NaN}}',
        400,
        "timeout",
    ),
    case("missing_inputs", b"{}", 400, "'inputs'"),
    case("inputs_null", b'{"inputs": null}', 400, "'inputs'"),
    case("inputs_not_list", dumps({"inputs": tensor()}), 400, "'inputs'", "list"),
    case("input_not_object", dumps({"inputs": [5]}), 400, "inputs[0]"),
    case("input_without_name", request(without(tensor(), "name")), 400, "inputs[0]", "'name'"),
    case("input_name_not_string", request(tensor(name=7)), 400, "inputs[0]", "'name'"),
    case(
        "input_without_datatype", request(without(tensor(), "datatype")), 400, "INPUT0", "datatype"
    ),
    case("input_without_shape", request(without(tensor(), "shape")), 400, "INPUT0", "shape"),
    case("unknown_datatype", request(tensor(datatype="FLOAT32")), 400, "FLOAT32", "INPUT0"),
    case("datatype_not_string", request(tensor(datatype=11)), 400, "datatype", "INPUT0"),
    # -- the input does not fit the model's signature ---------------------------------------
    case("datatype_mismatch", request(tensor(datatype="FP64")), 400, "INPUT0", "mlp_onnx", "FP32"),
    case("wrong_rank", request(tensor(shape=[4])), 400, "INPUT0", "mlp_onnx", "[-1, 4]"),
    case("wrong_dim", request(tensor(shape=[1, 5], data=[1.0] * 5)), 400, "INPUT0", "[-1, 4]"),
    case("negative_dim", request(tensor(shape=[-1, 4])), 400, "INPUT0", "negative"),
    case("float_dim", request(tensor(shape=[1.0, 4])), 400, "INPUT0", "shape"),
    case("string_dim", request(tensor(shape=["1", 4])), 400, "INPUT0", "shape"),
    case("bool_dim", request(tensor(shape=[True, 4])), 400, "INPUT0", "shape"),
    case("shape_not_list", request(tensor(shape=4, data=_FP32_4)), 400, "INPUT0", "shape"),
    case("too_many_dims", request(tensor(shape=[1] * 65, data=[1.0])), 400, "INPUT0", "dims"),
    # -- JSON data does not fit the shape or the datatype -------------------------------------
    case("data_fewer_than_shape", request(tensor(data=[1.0, 2.0, 3.0])), 400, "INPUT0", "4", "3"),
    case("data_more_than_shape", request(tensor(data=[1.0] * 5)), 400, "INPUT0", "4", "5"),
    case(
        "data_ragged",
        request(tensor(shape=[2, 4], data=[[1.0] * 4, [1.0] * 3])),
        400,
        "INPUT0",
        "ragged",
    ),
    case(
        "data_ragged_bytes",
        request(tensor(datatype="BYTES", shape=[1, 3], data=[["a", "b"], ["c"]])),
        400,
        "INPUT0",
        "ragged",
        path=identity("BYTES"),
    ),
    case(
        "data_beyond_fp32",
        request(tensor(data=[1.0, 2.0, -1e39, 4.0])),
        400,
        "tensor 'INPUT0' holds -1e+39, which is outside the FP32 range",
    ),
    case("data_string_in_fp32", request(tensor(data=["1", "2", "3", "4"])), 400, "INPUT0", "FP32"),
    case("data_null_in_fp32", request(tensor(data=[1.0, None, 3.0, 4.0])), 400, "INPUT0"),
    case(
        "data_bool_mixed_in_fp32",
        request(tensor(data=[1.0, True, 3.0, 4.0])),
        400,
        "INPUT0",
        "boolean",
    ),
    case("data_object_in_fp32", request(tensor(data=[{"v": 1}] * 4)), 400, "INPUT0"),
    case(
        "data_float_in_int32",
        request(tensor(datatype="INT32", shape=[1, 2], data=[1, 2.5])),
        400,
        "INPUT0",
        "INT32",
        path=identity("INT32"),
    ),
    case(
        "data_int_in_bool",
        request(tensor(datatype="BOOL", shape=[1, 2], data=[0, 1])),
        400,
        "INPUT0",
        "BOOL",
        path=identity("BOOL"),
    ),
    case(
        "data_bool_mixed_in_int32",
        request(tensor(datatype="INT32", shape=[1, 2], data=[True, 1])),
        400,
        "INPUT0",
        "INT32",
        path=identity("INT32"),
    ),
    case(
        "data_out_of_range_uint8",
        request(tensor(datatype="UINT8", shape=[1, 2], data=[1, 256])),
        400,
        "INPUT0",
        "range",
        path=identity("UINT8"),
    ),
    case(
        "data_negative_uint64",
        request(tensor(datatype="UINT64", shape=[1, 1], data=[-1])),
        400,
        "INPUT0",
        "range",
        path=identity("UINT64"),
    ),
    case(
        "data_above_int64",
        request(tensor(datatype="INT64", shape=[1, 1], data=[2**63])),
        400,
        "INPUT0",
        "range",
        path=identity("INT64"),
    ),
    case(
        "data_int_in_bytes",
        request(tensor(datatype="BYTES", shape=[1, 2], data=["a", 1])),
        400,
        "INPUT0",
        "string",
        path=identity("BYTES"),
    ),
    case(
        "fp16_as_json",
        request(tensor(datatype="FP16", shape=[1, 1], data=[1.0])),
        400,
        "INPUT0",
        "FP16",
        "binary",
        path=identity("FP16"),
    ),
    case(
        "bf16_as_json",
        request(tensor(datatype="BF16", shape=[1, 1], data=[1.0])),
        400,
        "INPUT0",
        "BF16",
        "binary",
        path=identity("BF16"),
    ),
    case("json_depth_10000", nested(10_000), 400, "JSON"),
    case("json_depth_1000", nested(1_000), 400, "INPUT0"),
    # -- shapes whose element count overflows or dwarfs the body ------------------------------
    case("shape_overflow_json", request(tensor(shape=[_BIG, _BIG], data=_FP32_4)), 400, "INPUT0"),
    case(
        "shape_overflow_binary",
        with_binary({"inputs": [binary_input("INPUT0", "FP32", [_BIG, _BIG], 16)]}, _BLOB16),
        400,
        "INPUT0",
    ),
    case(
        "huge_shape_tiny_json_body", request(tensor(shape=[10**12, 4], data=_FP32_4)), 400, "INPUT0"
    ),
    case(
        "huge_shape_tiny_binary_body",
        with_binary({"inputs": [binary_input("INPUT0", "FP32", [2**40, 4], 16)]}, _BLOB16),
        400,
        "INPUT0",
    ),
    case(
        "huge_bytes_shape_tiny_binary_body",
        with_binary(
            {"inputs": [binary_input("INPUT0", "BYTES", [1, 2**40], 8)]},
            bytes_elements(b"ab", b"")[:8],
        ),
        400,
        "INPUT0",
        path=identity("BYTES"),
    ),
    # -- the binary tensor data extension --------------------------------------------------
    case(
        "data_and_binary_data_size",
        with_binary({"inputs": [tensor(parameters={"binary_data_size": 16})]}, _BLOB16),
        400,
        "INPUT0",
        "exactly one",
    ),
    case("neither_data_nor_binary", request(tensor(data=None)), 400, "INPUT0", "exactly one"),
    case(
        "binary_size_past_body",
        with_binary({"inputs": [binary_input("INPUT0", "FP32", [1, 4], 32)]}, _BLOB16),
        400,
        "INPUT0",
        "32",
    ),
    case(
        "binary_size_mismatch_shape",
        with_binary({"inputs": [binary_input("INPUT0", "FP32", [2, 4], 16)]}, _BLOB16),
        400,
        "INPUT0",
        "32",
    ),
    case(
        "binary_leftover_bytes",
        with_binary({"inputs": [binary_input("INPUT0", "FP32", [1, 4], 16)]}, _BLOB16 + b"\0" * 4),
        400,
        "additional",
        "4 bytes",
    ),
    case(
        "binary_size_negative",
        with_binary({"inputs": [binary_input("INPUT0", "FP32", [1, 4], -16)]}, _BLOB16),
        400,
        "INPUT0",
        "binary_data_size",
    ),
    case(
        "binary_size_string",
        with_binary({"inputs": [binary_input("INPUT0", "FP32", [1, 4], "16")]}, _BLOB16),
        400,
        "INPUT0",
        "binary_data_size",
    ),
    case(
        "binary_bytes_length_past_end",
        with_binary(
            {"inputs": [binary_input("INPUT0", "BYTES", [1, 1], 6)]}, struct.pack("<I", 100) + b"ab"
        ),
        400,
        "INPUT0",
        path=identity("BYTES"),
    ),
    case(
        "binary_without_header_length",
        (JSON_HEADERS, dumps({"inputs": [binary_input("INPUT0", "FP32", [1, 4], 16)]}) + _BLOB16),
        400,
        "Inference-Header-Content-Length",
    ),
    case(
        "header_length_non_numeric",
        with_binary({"inputs": [binary_input("INPUT0", "FP32", [1, 4], 16)]}, _BLOB16, "abc"),
        400,
        "Inference-Header-Content-Length",
    ),
    case(
        "header_length_negative",
        with_binary({"inputs": [binary_input("INPUT0", "FP32", [1, 4], 16)]}, _BLOB16, "-5"),
        400,
        "Inference-Header-Content-Length",
    ),
    case(
        "header_length_past_body",
        with_binary({"inputs": [binary_input("INPUT0", "FP32", [1, 4], 16)]}, _BLOB16, "5000"),
        400,
        "Inference-Header-Content-Length",
    ),
    case(
        "header_length_99999999999",
        with_binary(
            {"inputs": [binary_input("INPUT0", "FP32", [1, 4], 16)]}, _BLOB16, "99999999999"
        ),
        400,
        "Inference-Header-Content-Length",
    ),
    case(  # a raw binary request: the whole body (JSON text too) is the one [-1, 4] input
        "header_length_zero",
        with_binary({"inputs": [binary_input("INPUT0", "FP32", [1, 4], 16)]}, _BLOB16, "0"),
        400,
        "not a whole number of 16-byte elements",
    ),
    case(
        "header_length_inside_json",
        with_binary({"inputs": [binary_input("INPUT0", "FP32", [1, 4], 16)]}, _BLOB16, "10"),
        400,
        "JSON",
    ),
    # -- inputs and requested outputs vs the model ---------------------------------------------
    case("unknown_input_name", request(tensor(name="INPUTX")), 400, "INPUTX", "mlp_onnx", "INPUT0"),
    case("missing_required_input", request(), 400, "mlp_onnx", "INPUT0", "missing"),
    case("duplicate_input", request(tensor(), tensor()), 400, "INPUT0", "more than once"),
    case(
        "unknown_output",
        request(tensor(), outputs=[{"name": "OUTPUTX"}]),
        400,
        "OUTPUTX",
        "mlp_onnx",
        "OUTPUT0",
    ),
    case(
        "duplicate_output",
        request(tensor(), outputs=[{"name": "OUTPUT0"}] * 2),
        400,
        "OUTPUT0",
        "more than once",
    ),
    case("outputs_not_list", request(tensor(), outputs={"name": "OUTPUT0"}), 400, "'outputs'"),
    case("output_without_name", request(tensor(), outputs=[{}]), 400, "outputs[0]", "'name'"),
    case("parameters_not_object", request(tensor(), parameters=[1]), 400, "parameters"),
    case("id_not_string", request(tensor(), id=7), 400, "'id'"),
    case(
        "streaming_model_unary",
        request(tensor(datatype="INT32", shape=[2], data=[1, 2])),
        400,
        "stream_python",
        "stream",
        path="/v2/models/stream_python/infer",
    ),
    # -- routing ----------------------------------------------------------------------------
    case(
        "unknown_model",
        request(tensor()),
        404,
        "no_such_model",
        path="/v2/models/no_such_model/infer",
    ),
    case(
        "unknown_model_metadata",
        b"",
        404,
        "no_such_model",
        method="GET",
        path="/v2/models/no_such_model",
    ),
    case(
        "unknown_version",
        request(tensor()),
        404,
        "mlp_onnx",
        "99",
        path="/v2/models/mlp_onnx/versions/99/infer",
    ),
    case(
        "non_numeric_version",
        request(tensor()),
        404,
        "Not Found",
        path="/v2/models/mlp_onnx/versions/abc/infer",
    ),
    case("infer_with_get", b"", 405, "Method Not Allowed", method="GET"),
    case("live_with_post", b"", 405, "Method Not Allowed", method="POST", path="/v2/health/live"),
    case(
        "metadata_with_delete",
        b"",
        405,
        "Method Not Allowed",
        method="DELETE",
        path="/v2/models/mlp_onnx",
    ),
    case("unknown_path", b"", 404, "Not Found", method="GET", path="/v2/no/such/path"),
    # -- numeric arrays of 1 KiB and more (the bulk JSON read): the same errors as small ones --
    *bulk_read_rows("large", _LARGE),
    *bulk_read_rows("mid", _MID),
    case(
        "large_binary_blob_short",
        with_binary(_BULK_DOC, _BULK_BLOB[:-4]),
        400,
        "unexpected size for input 'INPUT0'",
        path=identity("FP32"),
    ),
    case(
        "large_binary_blob_long",
        with_binary(_BULK_DOC, _BULK_BLOB + _BLOB16),
        400,
        "unexpected additional input data",
        "16 bytes",
        path=identity("FP32"),
    ),
    case(
        "large_ragged_nested",
        large("FP32", [[1.0] * 100] * 199 + [[1.0] * 99 + [[1.0]]], shape=(200, 100)),
        400,
        "ragged",
        path=identity("FP32"),
    ),
    case(
        "unknown_model_subpath",
        request(tensor()),
        404,
        "Not Found",
        path="/v2/models/mlp_onnx/predict",
    ),
]


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=TIMEOUT_S) as http:
        yield http


def send(http: httpx.Client, row: Case) -> httpx.Response:
    # Only the row's headers (plus Host / Content-Length, which the transport must set).
    req = http.build_request(row.method, row.path, content=row.body)
    for name in ("accept", "accept-encoding", "user-agent", "connection", "content-type"):
        req.headers.pop(name, None)
    req.headers.update(row.headers)
    return http.send(req)


def error_message(response: httpx.Response) -> str:
    assert response.headers.get("content-type", "").startswith("application/json"), (
        response.headers,
        response.content[:500],
    )
    doc = response.json()
    assert isinstance(doc, dict), doc
    assert set(doc) == {"error"}, doc
    assert isinstance(doc["error"], str), doc
    assert doc["error"], doc
    return str(doc["error"])


def assert_live(http: httpx.Client) -> None:
    live = http.get("/v2/health/live")
    assert live.status_code == 200, live.text


def test_catalogue_is_large_and_unique() -> None:
    names = [row.name for row in CASES]
    assert len(names) >= 30
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("row", CASES, ids=[row.name for row in CASES])
def test_bad_request(client: httpx.Client, row: Case) -> None:
    response = send(client, row)
    assert_live(client)  # first: a malformed request must never take the server down
    got = (response.status_code, response.content[:600])
    assert response.status_code == row.status, got
    message = error_message(response)
    missing = [part for part in row.message if part not in message]
    assert not missing, f"{missing} not in error message {message!r}"


def test_method_not_allowed_names_allowed_methods(client: httpx.Client) -> None:
    response = client.get(MLP)
    assert response.status_code == 405
    assert response.headers.get("allow") == "POST"
    assert_live(client)


def test_valid_request_still_served_after_catalogue(client: httpx.Client) -> None:
    # The same model that the catalogue hammered answers a well-formed request.
    response = client.post(MLP, content=request(tensor()), headers=JSON_HEADERS)
    assert response.status_code == 200, response.text
    out = response.json()["outputs"]
    assert [o["name"] for o in out] == ["OUTPUT0"]
    assert out[0]["shape"] == [1, 3]
    assert len(out[0]["data"]) == 3


LIMIT = 1024


def test_body_over_size_limit(repo: Path) -> None:
    small = start_server(repo, "--max-request-size", str(LIMIT))
    try:
        with httpx.Client(base_url=small.http_url, timeout=TIMEOUT_S) as http:
            # A well-formed request within the limit is served.
            ok = http.post(MLP, content=request(tensor()), headers=JSON_HEADERS)
            assert ok.status_code == 200, ok.text
            # Over the limit with a Content-Length: 413, naming the limit and the remedy.
            big = request(tensor(shape=[64, 4], data=[0.5] * 256))
            assert len(big) > LIMIT
            for body in (big, b"x" * (LIMIT + 1)):
                response = http.post(MLP, content=body, headers=JSON_HEADERS)
                assert response.status_code == 413, response.text
                message = error_message(response)
                assert str(LIMIT) in message, message
                assert "--max-request-size" in message, message
                assert_live(http)
            # Over the limit without a Content-Length (chunked): still 413.
            chunks = [big[i : i + 256] for i in range(0, len(big), 256)]
            response = http.post(MLP, content=iter(chunks), headers=JSON_HEADERS)
            assert "content-length" not in response.request.headers
            assert response.status_code == 413, response.text
            assert str(LIMIT) in error_message(response)
            assert_live(http)
    finally:
        code = small.stop()
    assert code == 0, "\n".join(small.lines)
