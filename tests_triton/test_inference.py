"""Plain inference (binary and JSON tensors, REST and gRPC), model metadata and configuration,
statistics counts, raw binary requests, classification and the errors of bad requests, on both
servers."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests_triton.clients import PROTOCOLS, client, counted, infer, stats
from tests_triton.servers import Peer

TEXT = np.array([b"hello", b"Triton", b""], dtype=object)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_numbers_and_strings_in_binary(server: Peer, protocol: str) -> None:
    x = np.array([0.5, -1.0, 3.0], np.float32)
    assert infer(server, protocol, "double", {"IN": x}, ["OUT"])["OUT"].tolist() == [1.0, -2.0, 6.0]
    answer = infer(server, protocol, "upper", {"TEXT": TEXT}, ["UPPER", "LENGTH"])
    assert answer["UPPER"].tolist() == [b"HELLO", b"TRITON", b""]
    assert answer["LENGTH"].tolist() == [5, 6, 0]


def test_numbers_and_strings_in_json(server: Peer) -> None:
    x = np.array([1.5, 2.0], np.float32)
    answer = infer(server, "http", "double", {"IN": x}, ["OUT"], binary=False)
    assert answer["OUT"].tolist() == [3.0, 4.0]
    answer = infer(server, "http", "upper", {"TEXT": TEXT}, ["UPPER"], binary=False)
    assert answer["UPPER"].tolist() == ["HELLO", "TRITON", ""]  # (tritonclient reads JSON: str)


def test_a_json_body_answers_the_same_json(server: Peer) -> None:
    body = {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [2], "data": [1, 2]}]}
    answer = post(server, "/v2/models/double/infer", json.dumps(body).encode(), {})
    assert json.loads(answer) == {
        "model_name": "double",
        "model_version": "1",
        "outputs": [{"name": "OUT", "datatype": "FP32", "shape": [2], "data": [2.0, 4.0]}],
    }


def test_model_metadata_and_configuration(server: Peer) -> None:
    with client(server, "http") as c:
        meta = c.get_model_metadata("upper")
        config = c.get_model_config("upper")
    meta.pop("properties", None)  # rosettaserve's addition (state, runtime, a failure's reason)
    assert meta == {
        "name": "upper",
        "versions": ["1"],
        "platform": "python",
        "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [-1]}],
        "outputs": [
            {"name": "UPPER", "datatype": "BYTES", "shape": [-1]},
            {"name": "LENGTH", "datatype": "INT64", "shape": [-1]},
        ],
    }
    assert (config["name"], config["backend"], config["max_batch_size"]) == ("upper", "python", 0)
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("TEXT", "TYPE_STRING", [-1])
    ]
    assert [o["name"] for o in config["output"]] == ["UPPER", "LENGTH"]
    with client(server, "grpc") as c:
        over_grpc = c.get_model_metadata("upper", as_json=True)
    assert [o["name"] for o in over_grpc["outputs"]] == ["UPPER", "LENGTH"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_statistics_count_each_request(server: Peer, protocol: str) -> None:
    before = stats(server, "double")
    for rows in (1, 2, 3):
        infer(server, protocol, "double", {"IN": np.ones(rows, np.float32)}, ["OUT"])
    counted(server, {"double": before["inference_stats"]["success"]["count"]}, 3)
    after = stats(server, "double")
    assert after["inference_count"] - before["inference_count"] == 3
    assert after["execution_count"] - before["execution_count"] == 3
    for kind in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert (
            after["inference_stats"][kind]["count"] - before["inference_stats"][kind]["count"] == 3
        )
    assert after["inference_stats"]["fail"]["count"] == before["inference_stats"]["fail"]["count"]


def test_a_raw_binary_request_is_the_one_input(server: Peer) -> None:
    """Inference-Header-Content-Length: 0: the body is IN's bytes, its shape from their count;
    the answer is the same bytes from both (a JSON header, then OUT in binary)."""
    body = np.array([1.0, 2.0, 3.0], np.float32).tobytes()
    answer = post(server, "/v2/models/double/infer", body, {"Inference-Header-Content-Length": "0"})
    header = (
        b'{"model_name":"double","model_version":"1","outputs":[{"name":"OUT","datatype":"FP32"'
    )
    header += b',"shape":[3],"parameters":{"binary_data_size":12}}]}'
    assert answer == header + np.array([2.0, 4.0, 6.0], np.float32).tobytes()
    result = httpclient.InferenceServerClient.parse_response_body(answer, header_length=len(header))
    assert result.as_numpy("OUT").tolist() == [2.0, 4.0, 6.0]


def test_a_raw_binary_request_a_bytes_input_cannot_take(server: Peer) -> None:
    status, message = post_error(server, "/v2/models/upper/infer", b"abc")
    assert status == 400
    assert "'TEXT'" in message
    assert "[1]" in message  # a BYTES raw input needs the model's shape [1]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_unknown_model_is_not_found(server: Peer, protocol: str) -> None:
    with pytest.raises(InferenceServerException) as caught:
        infer(server, protocol, "nothing", {"IN": np.ones(1, np.float32)}, ["OUT"])
    assert caught.value.status() == ("404" if protocol == "http" else "StatusCode.NOT_FOUND")
    assert "'nothing'" in caught.value.message()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_wrong_shape_or_datatype_is_a_bad_request(server: Peer, protocol: str) -> None:
    bad = "400" if protocol == "http" else "StatusCode.INVALID_ARGUMENT"
    for given in (np.ones((1, 2), np.float32), np.ones(2, np.int32)):
        with pytest.raises(InferenceServerException) as caught:
            infer(server, protocol, "double", {"IN": given}, ["OUT"])
        assert caught.value.status() == bad
        assert "'IN'" in caught.value.message()
        assert "'double'" in caught.value.message()
    with pytest.raises(InferenceServerException) as unknown:
        infer(server, protocol, "double", {"NOPE": np.ones(1, np.float32)}, ["OUT"])
    assert unknown.value.status() == bad
    assert "'NOPE'" in unknown.value.message()


def test_a_json_shape_its_data_does_not_fill(server: Peer) -> None:
    """A documented difference: Triton answers 500 (its JSON parser's failure), rosettaserve 400
    (the client's mistake)."""
    body = {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [3], "data": [1, 2]}]}
    status, _ = post_error(server, "/v2/models/double/infer", json.dumps(body).encode(), {})
    assert status == (500 if server.name == "triton" else 400)


def post(server: Peer, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    request = urllib.request.Request(f"http://{server.http}{path}", body, headers, method="POST")
    with urllib.request.urlopen(request, timeout=30) as reply:
        answer: bytes = reply.read()
        return answer


def post_error(
    server: Peer, path: str, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, str]:
    """The status and error message of a request that fails (raw binary unless ``headers``)."""
    headers = {"Inference-Header-Content-Length": "0"} if headers is None else headers
    with pytest.raises(urllib.error.HTTPError) as caught:
        post(server, path, body, headers)
    message: str = json.loads(caught.value.read())["error"]
    return caught.value.code, message


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_classification_answers_the_largest_scores_labelled(server: Peer, protocol: str) -> None:
    """class_count: the N largest values as "value:index:label", labels from labels.txt."""
    module: Any = httpclient if protocol == "http" else grpcclient
    given = module.InferInput("IN", [3], "FP32")
    given.set_data_from_numpy(np.array([0.25, 0.5, 0.125], np.float32))
    asked = module.InferRequestedOutput("SCORES", class_count=2)
    with client(server, protocol) as c:
        answer = c.infer("scores", [given], outputs=[asked]).as_numpy("SCORES")
    assert answer.tolist() == [b"0.500000:1:dog", b"0.250000:0:cat"]
