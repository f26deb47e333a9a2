"""TorchServe's inference API routes over a fake servable model: requests are built as
TorchServe's frontend builds them, and errors come in its shape."""

from __future__ import annotations

import asyncio
import json

from rosettaserve.core.registry import ModelVersion, VersionState
from rosettaserve.protocols.torchserve import rest
from rosettaserve.protocols.torchserve.wire import HandlerFailed, TsAnswer, TsRequest
from rosettaserve.web.routing import HttpRequest


def request(body: bytes, content_type: str = "", rest_path: str = "") -> HttpRequest:
    headers = {"content-type": content_type, "x-a": "1"} if content_type else {"x-a": "1"}
    params = {"model": "m", "rest": rest_path} if rest_path else {"model": "m"}
    return HttpRequest("POST", "/predictions/m", b"", headers, body, params=params)


def test_a_body_is_the_parameter_body_with_its_media_type() -> None:
    got = rest.ts_request(request(b"{}", "application/json; charset=utf-8"))
    assert [(p.name, p.content_type, p.value) for p in got.parameters] == [
        ("body", "application/json", b"{}")
    ]
    assert got.headers["x-a"] == "1"
    assert (got.headers["url_path"], got.headers["explain"]) == ("", "False")


def test_url_path_is_what_follows_the_version() -> None:
    assert rest.ts_request(request(b"", rest_path="a/b")).headers["url_path"] == "a/b"


def test_form_fields_are_parameters() -> None:
    got = rest.ts_request(request(b"a=1&b=&c=x%20y", "application/x-www-form-urlencoded"))
    assert [(p.name, p.value) for p in got.parameters] == [("a", b"1"), ("b", b""), ("c", b"x y")]


def test_multipart_files_keep_their_media_type() -> None:
    body = (
        b'--B\r\nContent-Disposition: form-data; name="f"; filename="x"\r\n'
        b"Content-Type: image/png\r\n\r\nPNG\r\n"
        b'--B\r\nContent-Disposition: form-data; name="n"\r\n\r\nhi\r\n--B--\r\n'
    )
    got = rest.ts_request(request(body, "multipart/form-data; boundary=B"))
    assert [(p.name, p.content_type, p.value) for p in got.parameters] == [
        ("f", "image/png", b"PNG"),
        ("n", "", b"hi"),
    ]


def test_a_part_whose_header_parameters_cannot_be_read_is_kept_unnamed() -> None:
    # the standard library's parser raised IndexError on "nam*" cut short (found by fuzzing):
    # the part is kept, with no name and no type, and its neighbours are read as usual
    body = (
        b'--B\r\nContent-Disposition: form-data; name="n"\r\n\r\nhi\r\n'
        b"--B\r\nContent-Disposition: form-data; nam*\r\n\r\nthere\r\n--B--\r\n"
    )
    got = rest.ts_request(request(body, "multipart/form-data; boundary=B"))
    assert [(p.name, p.content_type, p.value) for p in got.parameters] == [
        ("n", "", b"hi"),
        ("", "", b"there"),
    ]


def test_errors_have_torchserves_shape_and_layout() -> None:
    response = rest.error(404, "ModelNotFoundException", "Model not found: m")
    assert response.status == 404
    assert response.body == (
        b'{\n  "code": 404,\n  "type": "ModelNotFoundException",\n'
        b'  "message": "Model not found: m"\n}\n'
    )


class Servable:
    def __init__(self, answer: TsAnswer | Exception) -> None:
        self.answer = answer

    async def serve(self, request: TsRequest) -> TsAnswer:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def Version(model: object, version: str = "1") -> ModelVersion:
    return ModelVersion("m", version, "torchserve", VersionState.READY, model=model)  # type: ignore[arg-type]


class Plane:
    def __init__(self, versions: dict[str, list[ModelVersion]]) -> None:
        self.registry = self
        self.observer = None
        self._versions = versions

    def versions(self, name: str) -> list[ModelVersion] | None:
        return self._versions.get(name)


def predict(plane: Plane, path_params: dict[str, str]) -> tuple[int, bytes, str, dict]:
    (route,) = [r for r in rest.routes(plane, {}) if r.method == "POST"]  # type: ignore[arg-type]
    req = HttpRequest("POST", "/predictions/m", b"", {}, b"x", params=path_params)
    response = asyncio.run(route.handler(req))
    return response.status, response.body, response.content_type, response.headers


def test_the_handlers_status_type_and_headers_are_answered() -> None:
    answer = TsAnswer(418, "", {"content-type": "x", "h": "v"}, b"body")
    plane = Plane({"m": [Version(Servable(answer))]})
    assert predict(plane, {"model": "m"}) == (418, b"body", "", {"h": "v"})
    (version,) = plane.versions("m") or []
    assert version.stats.success.count == 1  # counted as every protocol's requests
    assert version.inflight == 0


def test_a_failed_batch_is_an_internal_server_exception() -> None:
    plane = Plane({"m": [Version(Servable(HandlerFailed(503, "Prediction failed")))]})
    status, body, _, _ = predict(plane, {"model": "m"})
    assert status == 503
    assert plane.versions("m")[0].stats.fail.count == 1  # type: ignore[index]
    assert json.loads(body)["type"] == "InternalServerException"


def test_unknown_versions_and_models_that_are_not_torchserves() -> None:
    plane = Plane({"m": [Version(Servable(TsAnswer(200, "", {})))], "o": [Version(object())]})
    status, body, _, _ = predict(plane, {"model": "m", "version": "2"})
    assert (status, json.loads(body)["type"]) == (404, "ModelVersionNotFoundException")
    status, body, _, _ = predict(plane, {"model": "o"})
    assert (status, json.loads(body)["type"]) == (404, "ModelNotFoundException")
