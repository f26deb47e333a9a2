"""The TF Serving route handler on its own: TF's path grammar and its errors."""

from __future__ import annotations

import asyncio

import pytest

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import InvalidInput
from rosettaserve.protocols.tfserving.rest import METHODS, PATH, routes
from rosettaserve.web.routing import HttpRequest, Router


class Empty:
    def model_names(self) -> list[str]:
        return []

    def versions(self, name: str) -> None:
        return None

    def version_for_label(self, name: str, label: str) -> None:
        return None


def call(method: str, path: str, body: bytes = b"") -> str:
    route, params = Router(routes(DataPlane(Empty()))).match(method, path)
    assert route.pattern == PATH
    with pytest.raises(InvalidInput) as err:
        asyncio.run(route.handler(HttpRequest(method, path, b"", {}, body, params=params)))
    return err.value.message


def test_every_method_but_head_reaches_the_handler() -> None:
    assert set(METHODS) == {"GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"}
    assert call("PUT", "/v1/models/m") == "Malformed request: PUT /v1/models/m"
    assert (
        call("OPTIONS", "/v1/models/m:predict") == "Malformed request: OPTIONS /v1/models/m:predict"
    )


def test_a_status_request_needs_a_model_name() -> None:
    assert call("GET", "/v1/models") == "Missing model name in request."
    assert call("GET", "/v1/models/versions/3/metadata") == "Missing model name in request."


def test_what_tf_s_two_patterns_do_not_match() -> None:
    for method, path in [
        ("POST", "/v1/models"),
        ("POST", "/v1/models/m"),
        ("POST", "/v1/models/m:Predict"),
        ("GET", "/v1/models/m/versions/1/labels/a"),
        ("GET", "/v1/models/m/versions/-1"),
        ("GET", "/v1/models/m/versions/\u0661"),  # an Arabic-Indic digit is not ASCII
        ("POST", "/v1/models/m/labels/a/b:predict"),
    ]:
        assert call(method, path) == f"Malformed request: {method} {path}"


def test_body_errors_come_before_the_model_lookup() -> None:
    assert call("POST", "/v1/models/m:predict", b"").startswith("JSON Parse error")
    assert call("POST", "/v1/models/m:regress", b'{"examples": []}').endswith("is an empty array")
