"""TensorFlow Serving REST API v1 against a real server process.

First every curl example of the spec (003, "RESTful API") is replayed as written, with only the
host changed, then TF Serving's own REST expectations for half_plus_two, then routing, formats,
datatypes and a catalogue of bad requests after which the server must still answer.
"""

from __future__ import annotations

import gzip
import json
import math
import shlex
from typing import Any

import httpx
import pytest

from tests.serverproc import ServerProcess

TIMEOUT_S = 30.0

# The spec's curl examples and the answers it shows, verbatim (host: localhost:8501).
SPEC_EXAMPLES = [
    (
        "curl http://localhost:8501/v1/models/saved_model_half_plus_three",
        200,
        {
            "model_version_status": [
                {
                    "version": "123",
                    "state": "AVAILABLE",
                    "status": {"error_code": "OK", "error_message": ""},
                }
            ]
        },
    ),
    (
        """curl -d '{"instances": [1.0,2.0,5.0]}' -X POST """
        "http://localhost:8501/v1/models/saved_model_half_plus_three:predict",
        200,
        {"predictions": [3.5, 4.0, 5.5]},
    ),
    (
        """curl -d '{"signature_name": "tensorflow/serving/regress", "examples": [{"x": 1.0}, """
        """{"x": 2.0}]}' -X POST http://localhost:8501/v1/models/saved_model_half_plus_three:regress""",
        200,
        {"results": [3.5, 4.0]},
    ),
    (
        """curl -i -d '{"instances": [1.0,5.0]}' -X POST http://localhost:8501/v1/models/half:predict""",
        404,
        {"error": "Servable not found for request: Latest(half)"},
    ),
]


def curl(command: str, hostport: str) -> httpx.Response:
    """Run a curl command line of the spec with httpx: -d DATA, -X METHOD, -i, the URL."""
    args = shlex.split(command)[1:]
    method, data, url = "GET", None, ""
    while args:
        arg = args.pop(0)
        if arg == "-d":
            data, method = args.pop(0), "POST" if method == "GET" else method
        elif arg == "-X":
            method = args.pop(0)
        elif arg != "-i":
            url = arg.replace("localhost:8501", hostport)
    return httpx.request(method, url, content=data, timeout=TIMEOUT_S)


@pytest.mark.parametrize(("command", "status", "expected"), SPEC_EXAMPLES)
def test_spec_curl_examples(
    server: ServerProcess, command: str, status: int, expected: dict[str, Any]
) -> None:
    response = curl(command, server.http_hostport)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert tf_part(response.json()) == expected


def tf_part(doc: dict[str, Any]) -> dict[str, Any]:
    """A model status body without OpenAI's model object, which shares it (models.retrieve)."""
    if "model_version_status" not in doc:
        return doc
    openai = {k: doc.pop(k) for k in ("id", "object", "created", "owned_by")}
    assert openai["object"] == "model"
    assert isinstance(openai["id"], str)
    assert isinstance(openai["created"], int)
    return doc


def get(server: ServerProcess, path: str) -> httpx.Response:
    return httpx.get(server.http_url + path, timeout=TIMEOUT_S)


def post(server: ServerProcess, path: str, body: Any, **headers: str) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(server.http_url + path, content=content, headers=headers, timeout=TIMEOUT_S)


def error_of(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert list(body) == ["error"]
    return str(body["error"])


# -- TF Serving's own REST expectations for half_plus_two (fact sheet §10) ---------------------

H2 = "/v1/models/half_plus_two"


def test_half_plus_two_predict_classify_regress_as_tf_s_tests_expect(server: ServerProcess) -> None:
    rows = post(server, H2 + ":predict", {"instances": [2.0, 3.0, 4.0]})
    assert rows.json() == {"predictions": [3.0, 3.5, 4.0]}
    cols = post(server, H2 + ":predict", {"inputs": [2.0, 3.0, 4.0]})
    assert cols.json() == {"outputs": [3.0, 3.5, 4.0]}
    named = post(
        server, H2 + ":predict", {"signature_name": "serving_default", "inputs": [3.0, 4.0]}
    )
    assert named.json() == {"outputs": [3.5, 4.0]}
    classify = {"signature_name": "classify_x_to_y", "examples": [{"x": 2.0}]}
    assert post(server, H2 + ":classify", classify).json() == {"results": [[["", 3.0]]]}
    for x, score in ((20.0, 12.0), (10.0, 7.0)):
        body = {"signature_name": "classify_x_to_y", "examples": [{"x": x}]}
        assert post(server, H2 + ":classify", body).json() == {"results": [[["", score]]]}
    regress = {"signature_name": "regress_x_to_y", "examples": [{"x": 2.0}]}
    assert post(server, H2 + ":regress", regress).json() == {"results": [3.0]}
    regress80 = {"signature_name": "regress_x_to_y", "examples": [{"x": 80.0}]}
    assert post(server, H2 + ":regress", regress80).json() == {"results": [42.0]}


def test_half_plus_two_status_and_metadata(server: ServerProcess) -> None:
    status = tf_part(get(server, H2).json())
    assert status == {
        "model_version_status": [
            {
                "version": "123",
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
        ]
    }
    meta = get(server, H2 + "/metadata").json()
    assert meta["model_spec"] == {"name": "half_plus_two", "signature_name": "", "version": "123"}
    defs = meta["metadata"]["signature_def"]["signature_def"]
    assert sorted(defs) == ["classify_x_to_y", "regress_x_to_y", "serving_default"]
    x = defs["serving_default"]["inputs"]["x"]
    assert x["dtype"] == "DT_FLOAT"
    assert x["tensor_shape"] == {"dim": [{"size": "-1", "name": ""}], "unknown_rank": False}
    assert defs["classify_x_to_y"]["method_name"] == "tensorflow/serving/classify"
    assert get(server, H2 + "/versions/123/metadata").json() == meta


# -- routing ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", H2),
        ("DELETE", H2 + ":predict"),
        ("GET", H2 + ":predict"),
        ("POST", H2 + "/metadata"),
        ("POST", H2 + ":PREDICT"),  # the verb is compared in lower case
        ("POST", H2 + ":explain"),
        ("GET", H2 + "/versions/HELLO"),
        ("GET", H2 + "/version/123"),
        ("GET", H2 + "/label/stable"),
        ("GET", H2 + "/versions/123/labels/stable"),
        ("GET", "/v1/models/a/b"),
    ],
)
def test_malformed_requests(server: ServerProcess, method: str, path: str) -> None:
    response = httpx.request(method, server.http_url + path, content=b"{}", timeout=TIMEOUT_S)
    assert error_of(response, 400) == f"Malformed request: {method} {path}"


def test_path_quirks(server: ServerProcess) -> None:
    upper = post(server, "/V1/MODELS/half_plus_two:predict", {"instances": [1.0]})
    assert upper.json() == {"predictions": [2.5]}  # the prefix is case-insensitive
    assert "model_version_status" in get(server, H2 + "/METADATA").json()  # a status request
    assert error_of(get(server, "/v1/models/versions/1"), 400) == "Missing model name in request."
    encoded = post(server, "/v1/models/half%5Fplus%5Ftwo:predict", {"instances": [1.0]})
    assert encoded.json() == {"predictions": [2.5]}
    huge = post(server, H2 + "/versions/18446744073709551615:predict", {"instances": [1.0]})
    assert error_of(huge, 400) == "Failed to convert version: 18446744073709551615 to numeric."


def test_versions_and_labels(server: ServerProcess) -> None:
    base = "/v1/models/versioned_python"  # versions 1 and 2; labels stable: 1, canary: 2
    body = {"instances": [[1.0, 2.0]]}
    assert post(server, base + ":predict", body).json() == {"predictions": [[2.0, 4.0]]}
    assert post(server, base + "/versions/1:predict", body).json() == {"predictions": [[1.0, 2.0]]}
    assert post(server, base + "/labels/stable:predict", body).json() == {
        "predictions": [[1.0, 2.0]]
    }
    assert post(server, base + "/labels/canary:predict", body).json() == {
        "predictions": [[2.0, 4.0]]
    }
    missing = post(server, base + "/versions/7:predict", body)
    assert error_of(missing, 404) == "Servable not found for request: Specific(versioned_python, 7)"
    unknown = post(server, base + "/labels/beta:predict", body)
    assert error_of(unknown, 400) == "Unrecognized servable version label: beta"
    status = get(server, base).json()["model_version_status"]
    assert [s["version"] for s in status] == ["2", "1"]
    assert get(server, base + "/labels/beta").json()["model_version_status"] == status  # ignored
    assert [
        s["version"] for s in get(server, base + "/versions/1").json()["model_version_status"]
    ] == ["1"]
    assert error_of(get(server, base + "/versions/3"), 404) == (
        "Could not find version 3 of model versioned_python"
    )
    assert (
        error_of(get(server, "/v1/models/nope"), 404) == "Could not find any versions of model nope"
    )
    assert error_of(get(server, "/v1/models/nope/metadata"), 404) == (
        "Servable not found for request: Latest(nope)"
    )
    assert get(server, base + "/labels/stable/metadata").json()["model_spec"]["version"] == "1"


def test_error_order(server: ServerProcess) -> None:
    broken = post(server, "/v1/models/nope:predict", b"{")
    assert error_of(broken, 400).startswith("JSON Parse error:")  # parse errors beat 404
    bad_rows = post(server, "/v1/models/nope:predict", {"instances": 5})
    assert error_of(bad_rows, 404) == "Servable not found for request: Latest(nope)"
    no_examples = post(server, "/v1/models/nope:regress", {"examples": 5})
    assert "Expecting 'examples' value to be an list/array" in error_of(no_examples, 400)
    label = post(server, "/v1/models/versioned_python/labels/x:predict", {"instances": 5})
    assert error_of(label, 400) == "Unrecognized servable version label: x"


# -- formats ----------------------------------------------------------------------------------

MULTI = "/v1/models/tfs_multi"
ROW_A = {"tag": "foo", "signal": [1, 2, 3, 4, 5], "sensor": [[1, 2], [3, 4]]}
ROW_B = {"tag": "bar", "signal": [3, 4, 1, 2, 5], "sensor": [[4, 5], [6, 8]]}


def test_several_inputs_and_outputs_in_rows_and_columns(server: ServerProcess) -> None:
    rows = post(server, MULTI + ":predict", {"instances": [ROW_A, ROW_B]}).json()
    assert rows == {
        "predictions": [
            {"tag_bytes": {"b64": "Zm9v"}, "label": "FOO", "signal_sum": 15.0, "sensor_max": 4},
            {"tag_bytes": {"b64": "YmFy"}, "label": "BAR", "signal_sum": 15.0, "sensor_max": 8},
        ]
    }
    columns = {k: [ROW_A[k], ROW_B[k]] for k in ROW_A}
    cols = post(server, MULTI + ":predict", {"inputs": columns}).json()
    assert cols == {
        "outputs": {
            "tag_bytes": [{"b64": "Zm9v"}, {"b64": "YmFy"}],
            "label": ["FOO", "BAR"],
            "signal_sum": [15.0, 15.0],
            "sensor_max": [4, 8],
        }
    }
    b64_in = {"inputs": {**columns, "tag": [{"b64": "/w=="}, "x"]}}
    assert post(server, MULTI + ":predict", b64_in).json()["outputs"]["tag_bytes"][0] == {
        "b64": "/w=="
    }


def test_row_format_output_checks(server: ServerProcess) -> None:
    scalar = post(
        server, MULTI + ":predict", {"signature_name": "with_scalar", "instances": [ROW_A]}
    )
    assert error_of(scalar, 400) == "Tensor name: count has no shape information "
    uneven = post(server, MULTI + ":predict", {"signature_name": "uneven", "instances": [ROW_A]})
    assert (
        error_of(uneven, 400)
        == "Tensor name: signal_flat has inconsistent batch size: 5 expecting: 1"
    )
    columns = {k: [ROW_A[k]] for k in ROW_A}
    ok = post(server, MULTI + ":predict", {"signature_name": "with_scalar", "inputs": columns})
    assert ok.json() == {"outputs": {"signal_sum": [15.0], "count": 1}}
    renamed = {"signature_name": "renamed", "inputs": {"t": ["a"], "s": [[0.5]], "n": [[[1]]]}}
    assert post(server, MULTI + ":predict", renamed).json() == {"outputs": [0.5]}


def test_nan_infinity_and_float_text(server: ServerProcess) -> None:
    body = b'{"instances": [NaN, Infinity, -Infinity, Inf, -Inf, 0.1, 1e-7, 1e7, 1]}'
    response = post(server, H2 + ":predict", body)
    assert response.status_code == 200
    assert response.content == (
        b'{"predictions":[NaN,Infinity,-Infinity,Infinity,-Infinity,2.05,2.0,5000002.0,2.5]}'
    )
    tiny = post(
        server, "/v1/models/identity_fp32:predict", {"inputs": [[0.1, 3, 9e6, 1 / 3, 3e-5]]}
    )
    assert tiny.content == b'{"outputs":[[0.1,3.0,9e+06,0.333333343,3e-05]]}'
    values = json.loads(response.content.decode(), parse_constant=float)
    assert math.isnan(values["predictions"][0])


def test_gzip_and_trailing_bytes(server: ServerProcess) -> None:
    packed = gzip.compress(b'{"instances": [1.0]}')
    zipped = post(server, H2 + ":predict", packed, **{"Content-Encoding": "gzip"})
    assert zipped.json() == {"predictions": [2.5]}
    broken = post(server, H2 + ":predict", b"not gzip", **{"Content-Encoding": "gzip"})
    assert error_of(broken, 400).startswith("the gzip request body cannot be inflated")
    trailing = post(server, H2 + ":predict", b'{"instances": [1.0]}\x00garbage')
    assert trailing.json() == {"predictions": [2.5]}


def test_a_scikit_learn_classifier_classifies_with_labels(server: ServerProcess) -> None:
    body = {"examples": [{"input": [5.1, 3.5, 1.4, 0.2]}, {"input": [6.7, 3.0, 5.2, 2.3]}]}
    results = post(server, "/v1/models/iris_sklearn:classify", body).json()["results"]
    assert [[label for label, _ in r] for r in results] == [
        ["setosa", "versicolor", "virginica"]
    ] * 2
    assert max(results[0], key=lambda pair: pair[1])[0] == "setosa"
    assert max(results[1], key=lambda pair: pair[1])[0] == "virginica"
    regress = post(server, "/v1/models/iris_sklearn:regress", body)
    assert error_of(regress, 400) == "Expected one output Tensor."
    context = {
        "context": {"input": [5.1, 3.5, 1.4, 0.2]},
        "examples": [{}, {"input": [6.7, 3.0, 5.2, 2.3]}],
    }
    assert post(server, "/v1/models/iris_sklearn:classify", context).json()["results"] == results


@pytest.mark.parametrize(
    ("dtype", "value", "status", "message"),
    [
        ("int32", [[1, 1.0]], 400, "JSON Value: 1.0 Type: Number is not of expected type: int32"),
        ("bool", [[True, 0]], 400, "JSON Value: 0 Type: Number is not of expected type: bool"),
        ("uint32", [[-1]], 400, "JSON Value: -1 Type: Number is not of expected type: uint32 "
         "(tensor 'INPUT0' holds -1, which is outside the UINT32 range [0, 4294967295])"),
        ("bytes", [[1]], 400, "JSON Value: 1 Type: Number is not of expected type: string"),
        ("fp32", [[{"b64": "AAAA"}]], 400,
         'JSON Value: {"b64":"AAAA"} Type: Object is not of expected type: float'),
        ("fp16", [[1.5]], 501, "Conversion of JSON Value: 1.5 to type: half"),
    ],
)  # fmt: skip
def test_leaf_types_through_the_server(
    server: ServerProcess, dtype: str, value: Any, status: int, message: str
) -> None:
    response = post(server, f"/v1/models/identity_{dtype}:predict", {"inputs": value})
    assert error_of(response, status) == message


@pytest.mark.parametrize(
    ("dtype", "value", "output"),
    [
        ("int8", [[-128, 127]], [[-128, 127]]),  # 300 is a 400 (test_integer_ranges.py)
        ("uint64", [[18446744073709551615]], [[18446744073709551615]]),
        ("bool", [[True, False]], [[True, False]]),
        ("bytes", [["hé", {"b64": "aGk="}]], [["hé", "hi"]]),
        ("fp64", [[0.1, 2]], [[0.1, 2.0]]),
    ],
)
def test_datatypes_round_trip(server: ServerProcess, dtype: str, value: Any, output: Any) -> None:
    response = post(server, f"/v1/models/identity_{dtype}:predict", {"instances": value})
    assert response.json() == {"predictions": output}


# -- bad input never crashes or stalls the server ----------------------------------------------

NASTY = [
    b"",
    b"{",
    b"[" * 200_000 + b"]" * 200_000,
    b'{"instances": ' + b"[" * 5000 + b"1" + b"]" * 5000 + b"}",
    b'{"instances": [1e999999]}',
    b'{"instances": [' + b"9" * 5000 + b"]}",
    b'{"instances": [NaN' + b"9" * 5000 + b"]}",
    b'{"inputs": {"x": "\xff\xfe"}}',
    b'{"instances": [{"b64": "' + b"A" * 100_001 + b'"}]}',
    b'{"examples": [{"x": [' + b"1," * 50_000 + b'1]}], "signature_name": "regress_x_to_y"}',
    b'{"examples": [{"x": {"b64": 5}}]}',
    b'{"instances": [[1, 2], "x", {"y": null}]}',
    b'{"signature_name": null, "inputs": []}',
    b'{"inputs": {"x": [[[[[1]]]]]}}',
    b"\x00\x01\x02",
    json.dumps({"instances": [*range(100_000), "x"]}).encode(),
]


@pytest.mark.parametrize("verb", ["predict", "classify", "regress"])
def test_bad_bodies_get_an_error_and_the_server_keeps_serving(
    server: ServerProcess, verb: str
) -> None:
    for body in NASTY:
        response = post(server, f"{H2}:{verb}", body)
        assert response.status_code in (400, 501), (body[:60], response.text)
        assert "error" in response.json()
    assert httpx.get(server.http_url + "/v2/health/live", timeout=TIMEOUT_S).status_code == 200
    assert post(server, H2 + ":predict", {"instances": [1.0]}).json() == {"predictions": [2.5]}
