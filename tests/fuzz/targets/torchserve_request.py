"""A TorchServe inference request's body turned into the handler's parameters
(``protocols/torchserve/rest.ts_request``): a form, a multipart form or a plain body.

The input's first byte picks the Content-Type (``TYPES``), the rest is the body. Properties:
nothing escapes; a plain body is one parameter ``body`` holding the bytes as sent; every
parameter's value is bytes and every name text.
"""

from __future__ import annotations

from rosettaserve.protocols.torchserve.rest import ts_request
from rosettaserve.web.routing import HttpRequest

TYPES = (
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=XyZ",
    "multipart/form-data",
    'multipart/mixed; boundary="a b"',
    "application/json",
    "text/plain; charset=utf-8",
    "",
)


def check(data: bytes) -> None:
    if not data:
        return
    content_type = TYPES[data[0] % len(TYPES)]
    body = data[1:]
    headers = {"content-type": content_type} if content_type else {}
    request = HttpRequest("POST", "/predictions/m", b"", headers, body, params={"model": "m"})
    parameters = ts_request(request).parameters
    for parameter in parameters:
        assert isinstance(parameter.name, str)
        assert isinstance(parameter.value, bytes)
    if not content_type.startswith(("multipart/", "application/x-www")):
        assert [(p.name, p.value) for p in parameters] == [("body", body)]
