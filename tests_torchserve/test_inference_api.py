"""TorchServe's inference API, asserted the same of the real TorchServe and of rosettaserve
serving the same archives (conftest's ``server`` fixture is each in turn)."""

from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import torch

from tests_torchserve.build_archives import linear_model


def test_ping_is_healthy(server: httpx.Client) -> None:
    r = server.get("/ping")
    assert r.status_code == 200
    assert r.json() == {"status": "Healthy"}


def expected_linear(rows: list[list[float]], tmp_path: object) -> list[list[float]]:
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 2)
    with torch.no_grad():
        out = layer(torch.tensor(rows)).tolist()
    return [[round(x, 5) for x in row] for row in out]


def test_a_basehandler_subclass_over_torchscript(server: httpx.Client, tmp_path) -> None:
    rows = [[1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 0.0, 2.0]]
    r = server.post("/predictions/linear", json=rows)
    assert r.status_code == 200
    assert r.json() == expected_linear(rows, tmp_path)
    assert linear_model(tmp_path / "m.pt").is_file()  # the archived weights are these
    assert r.text.startswith("[\n  [\n    ")  # TorchServe's json.dumps(indent=2) of the list


def test_the_version_in_the_path(server: httpx.Client, tmp_path) -> None:
    r = server.post("/predictions/linear/1", json=[1, 2, 3, 4])
    assert r.status_code == 200
    assert r.json() == expected_linear([[1.0, 2.0, 3.0, 4.0]], tmp_path)


def echo(server: httpx.Client, path: str = "/predictions/echo", **kwargs: object) -> dict:
    r = server.post(path, **kwargs)  # type: ignore[arg-type]
    assert r.status_code == 200, r.text
    assert "content-type" not in r.headers  # the handler set none: TorchServe sends none
    return r.json()


def test_a_json_body_reaches_the_handler_decoded_with_the_context(server: httpx.Client) -> None:
    got = echo(server, json={"a": [1, 2]}, headers={"x-trace": "abc"})
    assert got == {
        "keys": ["body"],
        "type": "dict",
        "value": {"a": [1, 2]},
        "param_headers": {"body": {"content-type": "application/json"}},
        "x_trace": "abc",
        "url_path": "",
        "explain": "False",
        "model_name": "echo",
        "handler": "echo_handler.py",
        "batch_size": 1,
        "gpu_id": None,
        "has_manifest": True,
        "yaml": {"custom": {"greeting": "hello"}},
        "request_id_is_set": True,
    }


def test_text_is_decoded_and_other_bodies_are_bytes(server: httpx.Client) -> None:
    text = echo(server, content=b"hello", headers={"content-type": "text/plain; charset=utf-8"})
    assert (text["type"], text["value"]) == ("str", "hello")
    assert text["param_headers"] == {"body": {"content-type": "text/plain"}}
    raw = echo(server, content=b"\x00\x01\x02", headers={"content-type": "image/png"})
    assert (raw["type"], raw["value"]) == ("bytearray", 3)
    bad = echo(server, content=b"{not json", headers={"content-type": "application/json"})
    assert (bad["type"], bad["value"]) == ("bytearray", 9)  # the worker forwards it undecoded


def test_a_body_without_a_content_type(server: httpx.Client) -> None:
    got = echo(server, content=b"abc")
    assert (got["type"], got["value"]) == ("bytearray", 3)
    assert got["param_headers"] == {"body": {"content-type": ""}}


def test_form_fields_are_parameters_each(server: httpx.Client) -> None:
    got = echo(server, data={"a": "1", "b": "two"})
    assert got["keys"] == ["a", "b"]
    assert got["type"] == "NoneType"


def test_multipart_fields_and_files(server: httpx.Client) -> None:
    files = {"data": ("x.bin", b"12345", "application/octet-stream")}
    got = echo(server, data={"note": "hi"}, files=files)
    assert got["keys"] == ["data", "note"]
    assert (got["type"], got["value"]) == ("bytearray", 5)
    assert got["param_headers"]["data"] == {"content-type": "application/octet-stream"}


def test_path_segments_past_the_version_are_url_path(server: httpx.Client) -> None:
    got = echo(server, "/predictions/echo/1/extra/seg", json={})
    assert got["url_path"] == "extra/seg"


def error(r: httpx.Response) -> tuple[int, dict]:
    return r.status_code, r.json()


def test_a_handler_that_raises_is_503_prediction_failed(server: httpx.Client) -> None:
    r = server.post("/predictions/echo", json={"do": "raise"})
    assert error(r) == (
        503,
        {"code": 503, "type": "InternalServerException", "message": "Prediction failed"},
    )
    assert r.text.startswith('{\n  "code": 503,')


def test_a_prediction_exception_keeps_its_code_and_message(server: httpx.Client) -> None:
    r = server.post("/predictions/echo", json={"do": "prediction_exception"})
    body = {"code": 422, "type": "InternalServerException", "message": "the input is refused"}
    assert error(r) == (422, body)


def test_the_status_and_content_type_a_handler_sets(server: httpx.Client) -> None:
    r = server.post("/predictions/echo", json={"do": "status"})
    assert r.status_code == 418
    r = server.post("/predictions/echo", json={"do": "text"})
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/plain"
    assert r.text == "plain text"


def test_answers_are_encoded_by_kind(server: httpx.Client) -> None:
    """Bytes as they are, a tensor as torch.save writes it, anything else as indented JSON."""
    r = server.post("/predictions/echo", json={"do": "bytes"})
    assert (r.status_code, r.content) == (200, b"\x00raw\xff")
    r = server.post("/predictions/echo", json={"do": "tensor"})
    assert torch.load(io.BytesIO(r.content)).tolist() == [1.5, -2.0]
    r = server.post("/predictions/echo", json={"do": "nested"})
    assert r.content == json.dumps({"b": [1, 2.5, None, True], "a": "\u00e9"}, indent=2).encode()
    r = server.post("/predictions/echo", json={"do": "header"})
    assert (r.status_code, r.headers["x-answer"]) == (200, "yes")


def test_answers_the_frame_cannot_carry_fail_the_batch(server: httpx.Client) -> None:
    for do, message in [
        ("unencodable", "Unsupported model output data type."),
        ("not_list", "Invalid model predict output"),
        ("short", "number of batch response mismatched"),
    ]:
        r = server.post("/predictions/echo", json={"do": do})
        assert error(r) == (
            503,
            {"code": 503, "type": "InternalServerException", "message": message},
        )


def test_unknown_models_and_versions_are_404(server: httpx.Client) -> None:
    assert error(server.post("/predictions/nope", content=b"x")) == (
        404,
        {"code": 404, "type": "ModelNotFoundException", "message": "Model not found: nope"},
    )
    message = "Model version: 9 does not exist for model: echo"
    assert error(server.post("/predictions/echo/9", content=b"x")) == (
        404,
        {"code": 404, "type": "ModelVersionNotFoundException", "message": message},
    )


def test_a_default_handler_loads_by_its_name(server: httpx.Client) -> None:
    """TorchServe's BaseHandler (``--handler base_handler``) loads the TorchScript file; its
    preprocess takes tensors' data, so a request's dict fails as it fails in TorchServe."""
    r = server.post("/predictions/default_base", json=[1, 2, 3, 4])
    assert error(r)[0] == 503


def test_streamed_answers_come_in_chunks(server: httpx.Client) -> None:
    with server.stream("POST", "/predictions/stream", content=b"x") as r:
        assert r.status_code == 200
        assert r.headers["ts_stream_next"] == "true"
        assert r.headers["transfer-encoding"] == "chunked"
        body = b"".join(r.iter_raw())
    parts = "".join(f"part {i} of request 0;" for i in range(3))
    assert body.decode() == parts + "end"


def test_requests_are_batched_up_to_batch_size(server: httpx.Client) -> None:
    """batchSize 4, maxBatchDelay 5000 ms in the archive's model-config.yaml: four requests
    sent together are handed to the handler as one batch."""

    def send(i: int) -> dict:
        r = server.post("/predictions/batch", json={"i": i})
        assert r.status_code == 200, r.text
        return json.loads(r.text)

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(send, range(4)))
    assert [a["value"] for a in answers] == [{"i": i} for i in range(4)]
    assert {a["batch"] for a in answers} == {4}


def test_over_oip_an_archive_is_bytes_in_and_bytes_out(rosetta, tmp_path) -> None:
    """The same handler over the Open Inference Protocol: each element of the BYTES input is a
    request body (the request's ``content_type`` parameter its media type), each element of
    the BYTES output the answer TorchServe would send."""
    doc = {
        "inputs": [
            {
                "name": "body",
                "datatype": "BYTES",
                "shape": [2],
                "data": ["[1, 2, 3, 4]", "[0, 0, 0, 1]"],
            }
        ],
        "parameters": {"content_type": "application/json"},
    }
    with httpx.Client(base_url=rosetta.http_url, timeout=120) as client:
        r = client.post("/v2/models/linear/infer", json=doc)
        assert r.status_code == 200, r.text
        (output,) = r.json()["outputs"]
        assert (output["name"], output["datatype"], output["shape"]) == ("output", "BYTES", [2])
        answers = [json.loads(text) for text in output["data"]]
        assert answers == [
            expected_linear([[1.0, 2.0, 3.0, 4.0]], tmp_path),
            expected_linear([[0.0, 0.0, 0.0, 1.0]], tmp_path),
        ]
        meta = client.get("/v2/models/linear").json()
        assert meta["platform"] == "torchserve"


def test_predictions_are_counted_in_the_metrics(rosetta) -> None:
    with httpx.Client(base_url=rosetta.http_url, timeout=120) as client:
        assert client.post("/predictions/echo", json={"do": "raise"}).status_code == 503
        assert client.post("/predictions/echo", json={}).status_code == 200
        text = client.get("/metrics").text
    labels = 'model="echo",version="1",protocol="torchserve",outcome="success"'
    ok = "rosettaserve_requests_total{" + labels + "}"
    failed = ok.replace("success", "internal")
    counts = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("rosettaserve_requests_total")
    }
    assert counts[ok] >= 1
    assert counts[failed] >= 1


def oip(rosetta, model: str, bodies: list[str], content_type: str = "") -> httpx.Response:
    doc: dict = {
        "inputs": [{"name": "body", "datatype": "BYTES", "shape": [len(bodies)], "data": bodies}]
    }
    if content_type:
        doc["parameters"] = {"content_type": content_type}
    with httpx.Client(base_url=rosetta.http_url, timeout=120) as client:
        return client.post(f"/v2/models/{model}/infer", json=doc)


def test_over_oip_streams_are_joined_and_failures_are_errors(rosetta) -> None:
    r = oip(rosetta, "stream", ["x"])
    assert r.status_code == 200, r.text
    parts = "".join(f"part {i} of request 0;" for i in range(3))
    assert r.json()["outputs"][0]["data"] == [parts + "end"]
    r = oip(rosetta, "echo", ['{"do": "raise"}'], "application/json")
    assert r.status_code == 500
    assert "Prediction failed" in r.json()["error"]
