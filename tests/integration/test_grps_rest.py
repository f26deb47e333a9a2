"""grps REST (/grps/v1/) against a real server: every data form both ways, model selection,
streaming and metadata, with plain HTTP."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

from tests.integration.grps_support import DEFAULT_MODEL, TIMEOUT_S, raw_post, status_of
from tests.serverproc import ServerProcess

JSON = "application/json"
OCTETS = "application/octet-stream"
PREDICT = "/grps/v1/infer/predict"


@pytest.fixture(scope="module")
def http(grps_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=grps_server.http_url + "/grps/v1/", timeout=TIMEOUT_S) as client:
        yield client


def predict(http: httpx.Client, doc: Any, query: str = "") -> httpx.Response:
    return http.post("infer/predict" + query, json=doc)


def ok_json(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    doc = response.json()
    assert doc["status"] == {"code": 200, "msg": "OK", "status": "SUCCESS"}
    return doc


# -- data forms --------------------------------------------------------------------------------


def test_str_data_in_str_data_out(http: httpx.Client) -> None:
    response = predict(http, {"str_data": "grps"})
    assert response.headers["content-type"].startswith(JSON)
    doc = ok_json(response)
    assert (doc["str_data"], doc["model"]) == ("hello, grps!", f"{DEFAULT_MODEL}-1")


def test_json_with_a_charset_and_unknown_keys(http: httpx.Client) -> None:
    body = json.dumps({"str_data": "ü", "s_t": {"ignored": True}}).encode()
    response = http.post(
        "infer/predict", content=body, headers={"content-type": f"{JSON}; charset=utf-8"}
    )
    assert ok_json(response)["str_data"] == "hello, ü!"


def test_octet_stream_in_raw_bytes_out(http: httpx.Client) -> None:
    raw = bytes(range(256))
    response = http.post("infer/predict", content=raw, headers={"content-type": OCTETS})
    assert response.status_code == 200
    assert response.headers["content-type"] == OCTETS
    assert response.content == b"hello, " + raw + b"!"


def test_a_large_octet_stream_body_is_bin_data_too(http: httpx.Client) -> None:
    """A body of 256 KiB or more is read into a buffer of its own (a bytearray)."""
    raw = bytes(range(256)) * 2048  # 512 KiB
    response = http.post("infer/predict", content=raw, headers={"content-type": OCTETS})
    assert response.status_code == 200, response.text
    assert response.content == b"hello, " + raw + b"!"


# (dt name, field, values, how they come back)
DTYPES: list[tuple[str, str, list[Any]]] = [
    ("DT_UINT8", "flat_uint8", [0, 1, 2, 3, 254, 255]),
    ("DT_INT8", "flat_int8", [-128, -1, 0, 1, 2, 127]),
    ("DT_INT16", "flat_int16", [-32768, -1, 0, 1, 2, 32767]),
    ("DT_INT32", "flat_int32", [-(2**31), -1, 0, 1, 2, 2**31 - 1]),
    ("DT_INT64", "flat_int64", [str(-(2**63)), "-1", "0", "1", str(2**53 + 1), str(2**63 - 1)]),
    ("DT_FLOAT16", "flat_float16", [-2.5, -1.0, 0.0, 0.5, 1.5, 65504.0]),
    ("DT_FLOAT32", "flat_float32", [-2.5, -1.0, 0.0, 0.1, 1.5, 3.25]),
    ("DT_FLOAT64", "flat_float64", [-2.5, -1.0, 0.0, 0.1, 1.5, 1e300]),
    ("DT_STRING", "flat_string", ["a", "", "ü", "grps", "x y", "6"]),
]
IDENTITY = {"DT_STRING": "bytes", "DT_FLOAT16": "fp16", "DT_FLOAT32": "fp32"}
IDENTITY |= {"DT_FLOAT64": "fp64"}


@pytest.mark.parametrize(("dtype", "field", "values"), DTYPES, ids=[d[0] for d in DTYPES])
def test_gtensors_of_every_dtype_round_trip(
    http: httpx.Client, dtype: str, field: str, values: list[Any]
) -> None:
    model = "identity_" + IDENTITY.get(dtype, dtype.removeprefix("DT_").lower())
    tensor = {"name": "INPUT0", "dtype": dtype, "shape": [2, 3], field: values}
    doc = ok_json(predict(http, {"model": model, "gtensors": {"tensors": [tensor]}}))
    assert doc["gtensors"]["tensors"] == [
        {"name": "OUTPUT0", "dtype": dtype, "shape": [2, 3], field: values}
    ]


def test_unnamed_gtensors_take_the_declared_inputs(http: httpx.Client) -> None:
    tensor = {"dtype": 4, "shape": [1, 2], "flat_int32": [7, 8]}  # dtype by number
    doc = ok_json(predict(http, {"gtensors": {"tensors": [tensor]}}, "?model=identity_int32"))
    (out,) = doc["gtensors"]["tensors"]
    assert (out["name"], out["dtype"], out["flat_int32"]) == ("OUTPUT0", "DT_INT32", [7, 8])


def test_ndarray_in_and_ndarray_out(http: httpx.Client) -> None:
    nested = [[1.5, 2, 3], [4, 5, 6.25]]
    doc = ok_json(
        predict(http, {"ndarray": nested, "model": "identity_fp32"}, "?return-ndarray=TRUE")
    )
    assert doc["ndarray"] == nested
    assert "gtensors" not in doc


def test_ndarray_in_gtensors_out_with_the_shape_inferred(http: httpx.Client) -> None:
    nested = np.arange(12, dtype=np.float32).reshape(3, 4).tolist()
    doc = ok_json(predict(http, {"ndarray": nested, "model": "versioned_python-2"}))
    (out,) = doc["gtensors"]["tensors"]
    assert (out["dtype"], out["shape"]) == ("DT_FLOAT32", [3, 4])
    assert out["flat_float32"] == [2.0 * v for v in range(12)]  # version 2 doubles


def test_gmap_of_every_map_round_trips(http: httpx.Client) -> None:
    blob = b"\xff\x00\x80binary"
    gmap = {
        "s_s": {"text": "héllo"},
        "s_b": {"blob": base64.b64encode(blob).decode()},
        "s_i32": {"count": -3},
        "s_i64": {"big": str(2**62 + 1)},
        "s_f": {"ratio": 0.1},
        "s_d": {"precise": 0.1},
    }
    doc = ok_json(predict(http, {"gmap": gmap}, "?model=grps_map_echo"))
    assert doc["gmap"] == gmap
    assert base64.b64decode(doc["gmap"]["s_b"]["blob"]) == blob


def test_outputs_that_do_not_fit_the_request_form_answer_in_gtensors(http: httpx.Client) -> None:
    doc = ok_json(predict(http, {"str_data": "abc", "model": "text_python"}))
    assert doc["gtensors"]["tensors"] == [
        {"name": "UPPER", "dtype": "DT_STRING", "shape": [1], "flat_string": ["ABC"]},
        {"name": "LENGTH", "dtype": "DT_INT64", "shape": [1], "flat_int64": ["3"]},
    ]


# -- model selection ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "query", "model"),
    [
        ({"str_data": "x", "model": "grps_faulty"}, "?model=text_python", "grps_faulty-1"),
        ({"str_data": "x", "model": ""}, "?model=grps_faulty", "grps_faulty-1"),
        ({"str_data": "x"}, "", f"{DEFAULT_MODEL}-1"),
        ({"ndarray": [[1.0]], "model": "versioned_python-1"}, "", "versioned_python-1"),
        ({"ndarray": [[1.0]], "model": "versioned_python-canary"}, "", "versioned_python-2"),
        ({"ndarray": [[1.0]], "model": "versioned_python"}, "", "versioned_python-2"),
    ],
)
def test_payload_then_query_then_default(
    http: httpx.Client, doc: dict[str, Any], query: str, model: str
) -> None:
    assert ok_json(predict(http, doc, query))["model"] == model


def test_an_unknown_model_is_a_404_failure_naming_it(http: httpx.Client) -> None:
    response = predict(http, {"str_data": "x", "model": "no_such_model-1"}, "?model=text_python")
    assert response.status_code == 404
    doc = response.json()
    assert status_of(doc) == (404, "FAILURE")
    assert "no_such_model-1" in doc["status"]["msg"]
    assert set(doc) == {"status"}


# -- streaming ---------------------------------------------------------------------------------


def stream(server: ServerProcess, doc: dict[str, Any], query: str) -> Any:
    return raw_post(server.http_url, PREDICT + query, json.dumps(doc).encode(), JSON)


def test_streaming_is_chunked_one_json_line_per_chunk(grps_server: ServerProcess) -> None:
    doc = {"str_data": "the quick brown fox", "model": "words_stream_python"}
    response = stream(grps_server, doc, "?streaming=true")
    assert (response.status, response.headers["transfer-encoding"]) == (200, "chunked")
    assert all(chunk.endswith(b"\n") and chunk.count(b"\n") == 1 for chunk in response.chunks)
    docs = [json.loads(chunk) for chunk in response.chunks]
    assert [d["str_data"] for d in docs] == ["the", "quick", "brown", "fox"]
    assert all(status_of(d) == (200, "SUCCESS") for d in docs)
    assert {d["model"] for d in docs} == {"words_stream_python-1"}


def test_an_error_mid_stream_ends_it_with_a_failure(grps_server: ServerProcess) -> None:
    doc = {"str_data": "fail-midway", "model": "grps_faulty_stream"}
    response = stream(grps_server, doc, "?streaming=True")
    docs = [json.loads(chunk) for chunk in response.chunks]
    assert [d.get("str_data") for d in docs] == ["part 1", "part 2", None]
    assert status_of(docs[-1]) == (500, "FAILURE")
    assert "failed after two parts" in docs[-1]["status"]["msg"]


def test_an_error_before_the_first_message_keeps_its_http_status(
    grps_server: ServerProcess,
) -> None:
    response = stream(
        grps_server, {"str_data": "fail-first"}, "?streaming=true&model=grps_faulty_stream"
    )
    assert (response.status, response.chunks) == (500, [])
    doc = json.loads(response.body)
    assert status_of(doc) == (500, "FAILURE")
    assert "failed before the first part" in doc["status"]["msg"]


def test_a_model_that_does_not_stream_streams_one_message(grps_server: ServerProcess) -> None:
    response = stream(grps_server, {"str_data": "once"}, "?streaming=true")
    assert [json.loads(c)["str_data"] for c in response.chunks] == ["hello, once!"]


def test_an_empty_stream_is_an_empty_chunked_reply(grps_server: ServerProcess) -> None:
    response = stream(
        grps_server, {"str_data": "0", "model": "grps_faulty_stream"}, "?streaming=true"
    )
    assert (response.status, response.chunks) == (200, [])


def test_streaming_with_a_line_reader(http: httpx.Client) -> None:
    with http.stream(
        "POST", "infer/predict?streaming=true&model=words_stream_python", json={"str_data": "a b"}
    ) as response:
        lines = [json.loads(line) for line in response.iter_lines() if line]
    assert [d["str_data"] for d in lines] == ["a", "b"]


# -- metadata ----------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_server_metadata_is_yaml(http: httpx.Client, method: str) -> None:
    doc = ok_json(http.request(method, "metadata/server"))
    meta = yaml.safe_load(doc["str_data"])
    assert meta["grps"]["default_model"] == DEFAULT_MODEL
    models = {m["model"]: m["state"] for m in meta["models"]}
    assert models["versioned_python-1"] == models["versioned_python-2"] == "READY"


def test_model_metadata_is_yaml(http: httpx.Client) -> None:
    meta = yaml.safe_load(
        ok_json(http.post("metadata/model", json={"str_data": "text_python"}))["str_data"]
    )
    assert (meta["name"], meta["version"], meta["runtime"]) == ("text_python", "1", "python")
    assert [i["name"] for i in meta["inputs"]] == ["TEXT"]
    assert [o["name"] for o in meta["outputs"]] == ["UPPER", "LENGTH"]
    by_query = yaml.safe_load(
        ok_json(http.get("metadata/model?model=words_stream_python"))["str_data"]
    )
    assert by_query["streaming"] is True
    missing = http.post("metadata/model", json={"str_data": "nope"})
    assert (missing.status_code, status_of(missing.json())) == (404, (404, "FAILURE"))


def test_monitor_metrics_is_the_monitor_web_page(http: httpx.Client) -> None:
    """grps: ``GET /grps/v1/monitor/metrics`` (and ``/``) is the metrics HTML page; GET only."""
    page = http.get("monitor/metrics")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert page.content == http.get(http.base_url.copy_with(path="/")).content
    assert b"<html" in page.content
    posted = http.post("monitor/metrics")
    assert posted.status_code == 405
    assert "GET" in posted.headers["allow"]


@pytest.mark.parametrize(
    ("method", "path", "code"),
    [("GET", "infer/predict", 405), ("GET", "monitor/nope", 404), ("POST", "nope/x", 404)],
)
def test_wrong_method_or_path_answers_in_grps_shape(
    http: httpx.Client, method: str, path: str, code: int
) -> None:
    response = http.request(method, path)
    assert response.status_code == code
    assert response.headers.get("allow") == ("POST" if code == 405 else None)
    assert status_of(response.json()) == (code, "FAILURE")
