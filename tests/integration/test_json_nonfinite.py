"""No silent data loss in JSON, against a real server: a finite number beyond the tensor's float
type is a 400 naming the tensor (OIP REST, TF Serving REST, grps REST alike), and NaN, Infinity
and -Infinity travel as those tokens both ways (core/json_nonfinite.py), read by the real
tritonclient.http (rapidjson) and by Python's json module."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as triton

from tests.serverproc import ServerProcess

TIMEOUT_S = 30.0
SPECIAL = [math.nan, math.inf, -math.inf]
BEYOND = "which is outside the FP32 range"


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=TIMEOUT_S) as client:
        yield client


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[triton.InferenceServerClient]:
    with triton.InferenceServerClient(server.http_hostport, network_timeout=TIMEOUT_S) as c:
        yield c


def values(dtype: type, size: int = 8) -> np.ndarray:
    out = np.linspace(-2.5, 2.5, size, dtype=dtype).reshape(1, size)
    out[0, 1:4] = SPECIAL
    return out


def identity_infer(
    client: triton.InferenceServerClient, data: np.ndarray, binary_in: bool, binary_out: bool
) -> triton.InferResult:
    datatype = "FP32" if data.dtype == np.float32 else "FP64"
    tensor = triton.InferInput("INPUT0", list(data.shape), datatype)
    tensor.set_data_from_numpy(data, binary_data=binary_in)
    wanted = [triton.InferRequestedOutput("OUTPUT0", binary_data=binary_out)]
    return client.infer(f"identity_{datatype.lower()}", [tensor], outputs=wanted)


# -- NaN and the infinities round-trip -------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("binary_in", "binary_out"), [(False, False), (True, False)])
def test_tritonclient_reads_back_nan_and_infinities(
    client: triton.InferenceServerClient, dtype: type, binary_in: bool, binary_out: bool
) -> None:
    """JSON in (tritonclient writes the tokens) or binary in; JSON out, which it parses."""
    sent = values(dtype)
    result = identity_infer(client, sent, binary_in, binary_out)
    got = result.as_numpy("OUTPUT0")
    assert got is not None
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, sent)  # NaN where NaN was
    data = result.get_output("OUTPUT0")["data"]
    assert math.isnan(data[1])
    assert data[2:4] == [math.inf, -math.inf]


def test_the_tokens_as_written(http: httpx.Client) -> None:
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]}
    raw = json.dumps(body).replace("[1, 2, 3]", "[NaN, Infinity, -Infinity]").encode()
    response = http.post("/v2/models/identity_fp32/infer", content=raw)
    assert response.status_code == 200, response.text
    assert b'"data":[NaN,Infinity,-Infinity]' in response.content
    data = json.loads(response.content)["outputs"][0]["data"]
    assert math.isnan(data[0])
    assert data[1:] == [math.inf, -math.inf]


def test_a_large_output_with_a_few_non_finite_values(
    client: triton.InferenceServerClient,
) -> None:
    """Thousands of values, sent in binary: the JSON answer spells each one out."""
    sent = values(np.float32, 20_000)
    sent[0, -1] = math.nan
    got = identity_infer(client, sent, True, False).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(got, sent)


# -- beyond the range: 400 naming the tensor ---------------------------------------------------


def fp32_body(data: list[Any]) -> dict[str, Any]:
    shape = [1, len(data)]
    return {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": shape, "data": data}]}


@pytest.mark.parametrize(
    ("data", "shown"),
    [
        ([1e39], "1e+39"),
        ([0.5, -1e39, 1.0], "-1e+39"),
        ([0.25] * 5000 + [3.5e38], "3.5e+38"),  # a large array: read in bulk
        ([2**130], "1.361129467683754e+39"),
    ],
    ids=["alone", "among_others", "bulk_read", "integer"],
)
def test_oip_fp32_beyond_its_range_is_a_400_naming_the_tensor(
    http: httpx.Client, data: list[Any], shown: str
) -> None:
    response = http.post("/v2/models/identity_fp32/infer", json=fp32_body(data))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error.startswith(f"tensor 'INPUT0' holds {shown}, {BEYOND}"), error
    as_fp64 = fp32_body(data)
    as_fp64["inputs"][0]["datatype"] = "FP64"
    kept = http.post("/v2/models/identity_fp64/infer", json=as_fp64)
    assert kept.status_code == 200, kept.text
    assert kept.json()["outputs"][0]["data"] == [float(v) for v in data]


def test_oip_fp32s_largest_value_as_printed_is_accepted(http: httpx.Client) -> None:
    response = http.post("/v2/models/identity_fp32/infer", json=fp32_body([3.4028235e38, 1.0]))
    assert response.status_code == 200, response.text
    top = float(np.finfo(np.float32).max)
    assert np.float32(response.json()["outputs"][0]["data"][0]) == np.float32(top)


def test_the_400_leaves_the_connection_and_the_server_serving(
    client: triton.InferenceServerClient, http: httpx.Client
) -> None:
    for _ in range(3):  # on one kept-alive connection
        refused = http.post("/v2/models/identity_fp32/infer", json=fp32_body([1e39]))
        assert refused.status_code == 400
    assert http.get("/v2/health/ready").status_code == 200
    ok = identity_infer(client, np.ones((1, 2), dtype=np.float32), False, False)
    assert ok.as_numpy("OUTPUT0").tolist() == [[1.0, 1.0]]


@pytest.mark.parametrize(
    "body",
    [{"instances": [[1.0], [1e39]]}, {"inputs": [[1e39]]}, {"inputs": {"INPUT0": [[-1e39]]}}],
    ids=["rows", "columns", "named_columns"],
)
def test_tfserving_fp32_beyond_its_range_is_a_400(http: httpx.Client, body: Any) -> None:
    response = http.post("/v1/models/identity_fp32:predict", json=body)
    assert response.status_code == 400, response.text
    assert "tensor 'INPUT0' holds " in response.json()["error"]
    assert BEYOND in response.json()["error"]


def test_tfserving_tokens_still_pass(http: httpx.Client) -> None:
    body = b'{"instances": [[NaN, Infinity, -Inf, 1e-50]]}'
    response = http.post("/v1/models/identity_fp32:predict", content=body)
    assert response.status_code == 200, response.text
    assert response.content == b'{"predictions":[[NaN,Infinity,-Infinity,0.0]]}'


def grps_predict(http: httpx.Client, body: Any, query: str = "") -> dict[str, Any]:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = http.post(
        "/grps/v1/infer/predict" + query,
        content=content,
        headers={"content-type": "application/json"},
    )
    return {"http": response.status_code, **json.loads(response.content)}


@pytest.mark.parametrize(
    ("body", "name"),
    [
        ({"ndarray": [[1.0, 1e39]]}, "ndarray"),
        (
            {
                "gtensors": {
                    "tensors": [
                        {"name": "INPUT0", "dtype": "DT_FLOAT32", "shape": [1, 1],
                         "flat_float32": [-1e39]}
                    ]
                }
            },
            "INPUT0",
        ),
    ],
    ids=["ndarray", "gtensors"],
)  # fmt: skip
def test_grps_fp32_beyond_its_range_is_a_400(http: httpx.Client, body: Any, name: str) -> None:
    doc = grps_predict(http, {**body, "model": "identity_fp32"})
    assert doc["http"] == 400, doc
    assert doc["status"]["code"] == 400
    assert doc["status"]["msg"].startswith(f"tensor '{name}' holds ")
    assert BEYOND in doc["status"]["msg"]


def test_grps_round_trips_the_tokens(http: httpx.Client) -> None:
    bare = b'{"model": "identity_fp32", "ndarray": [[NaN, Infinity, -Infinity, 3.4028235e+38]]}'
    answer = grps_predict(http, bare, "?return-ndarray=true")
    assert answer["http"] == 200, answer
    back = answer["ndarray"][0]
    assert math.isnan(back[0])
    assert back[1:3] == [math.inf, -math.inf]
    assert np.float32(back[3]) == np.finfo(np.float32).max  # written as 3.4028235e+38
    quoted = grps_predict(http, {"model": "identity_fp32", "ndarray": [[1.0]], "gtensors": {}})
    assert quoted["http"] == 400  # one data form only
    message = {
        "model": "identity_fp32",
        "gtensors": {
            "tensors": [
                {
                    "name": "INPUT0",
                    "dtype": "DT_FLOAT32",
                    "shape": [1, 3],
                    "flat_float32": ["NaN", "-Infinity", 3.4028235e38],
                }
            ]
        },
    }
    answer = grps_predict(http, message)
    assert answer["http"] == 200, answer
    assert answer["gtensors"]["tensors"][0]["flat_float32"] == ["NaN", "-Infinity", 3.4028235e38]
