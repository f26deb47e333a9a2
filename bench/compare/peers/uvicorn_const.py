"""Ceiling for REST: a bare ASGI app answering every POST with one constant V2 infer response.

Run: uvicorn uvicorn_const:app --app-dir bench/compare/peers --port P --loop uvloop
     --http httptools --lifespan off --log-level warning --no-access-log

The body is read in full, as a server must before it can answer. The answer is the identity
response for INPUT0 = [[1, 2, 3, 4]] (FP32 [1,4]); any GET gets 200 ``{}`` (readiness).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

INFER_RESPONSE = (
    b'{"model_name":"identity","outputs":[{"name":"OUTPUT0","datatype":"FP32",'
    b'"shape":[1,4],"data":[1.0,2.0,3.0,4.0]}]}'
)
EMPTY = b"{}"


def _start(body: bytes) -> Message:
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    return {"type": "http.response.start", "status": 200, "headers": headers}


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    body = EMPTY
    if scope["method"] == "POST":
        more = True
        while more:
            message = await receive()
            more = message.get("more_body", False)
        body = INFER_RESPONSE
    await send(_start(body))
    await send({"type": "http.response.body", "body": body})
