"""The scheduler's Responses store (pd/responses_kept.py): a reply kept from its JSON body or
from a stream's chunks however they are cut, an earlier exchange put before a later input, the
store's bound, and what is not kept."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from rosettaserve.core.errors import NotFound
from rosettaserve.pd.responses_kept import Kept, Recorder
from rosettaserve.protocols.openai.responses_output import event
from rosettaserve.web.routing import HttpRequest


def post(doc: Any, path: str = "/v1/responses") -> HttpRequest:
    body = doc if isinstance(doc, bytes) else orjson.dumps(doc)
    return HttpRequest("POST", path, b"", {}, body)


def response(rid: str, text: str, store: bool = True, status: str = "completed") -> Any:
    item = {"id": f"msg_{rid}", "type": "message", "role": "assistant", "status": status,
            "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip
    return {"id": rid, "object": "response", "status": status, "store": store, "output": [item]}


def stream(doc: Any, kind: str = "response.completed") -> bytes:
    head = event("response.created", {"response": {**doc, "status": "in_progress"}})
    return head + event(kind, {"response": doc, "sequence_number": 1})


async def pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def relayed(recorder: Recorder, data: bytes, size: int) -> bytes:
    async def drain() -> bytes:
        return b"".join([c async for c in recorder.observe(pieces(data, size))])

    return asyncio.run(drain())


def test_a_later_request_continues_the_kept_exchange() -> None:
    kept = Kept(4)
    body, recorder = kept.prepare(post({"model": "m", "input": "Hi"}))
    assert orjson.loads(body)["input"] == "Hi"  # nothing earlier: forwarded as it came
    assert recorder is not None
    first = response("resp_1", "Hello")
    recorder.whole(orjson.dumps(first))
    doc = {"model": "m", "input": [{"role": "user", "content": "More"}], "instructions": "x",
           "previous_response_id": "resp_1"}  # fmt: skip
    body, _ = kept.prepare(post(doc))
    sent = orjson.loads(body)
    assert sent["input"] == [{"role": "user", "content": "Hi"}, *first["output"], *doc["input"]]
    assert sent["previous_response_id"] == "resp_1"  # echoed by the instances
    assert sent["instructions"] == "x"
    with pytest.raises(NotFound, match="resp_2"):
        kept.prepare(post({"model": "m", "input": "x", "previous_response_id": "resp_2"}))


@pytest.mark.parametrize("size", [1, 7, 10_000])
@pytest.mark.parametrize("kind", ["response.completed", "response.incomplete"])
def test_a_streamed_reply_passes_unchanged_and_is_kept(size: int, kind: str) -> None:
    kept = Kept(4)
    _, recorder = kept.prepare(post({"model": "m", "input": "Hi", "stream": True}))
    assert recorder is not None
    final = response("resp_1", "Hello", status=kind.removeprefix("response."))
    data = stream(final, kind)
    assert relayed(recorder, data, size) == data
    assert kept.store.get("resp_1") == {
        "response": final,
        "items": [{"role": "user", "content": "Hi"}, *final["output"]],
    }


def test_what_is_not_kept() -> None:
    kept = Kept(4)
    _, recorder = kept.prepare(post({"model": "m", "input": "Hi", "store": False}))
    assert recorder is not None
    recorder.whole(orjson.dumps(response("resp_1", "a", store=False)))
    relayed(recorder, stream(response("resp_2", "a", status="failed"), "response.failed"), 5)
    recorder.whole(b"not json")
    assert len(kept.store) == 0
    for req in (post(b"{bad"), post({"model": "m", "input": 3}), post({}, "/v1/completions")):
        assert kept.prepare(req) == (req.body, None)  # the instance answers in its own words


def test_the_store_is_bounded() -> None:
    kept = Kept(2)
    for k in range(3):
        _, recorder = kept.prepare(post({"model": "m", "input": "Hi"}))
        assert recorder is not None
        recorder.whole(orjson.dumps(response(f"resp_{k}", "a")))
    assert kept.store.get("resp_0") is None
    assert kept.store.get("resp_2") is not None
    none_kept = Kept(0)
    _, recorder = none_kept.prepare(post({"model": "m", "input": "Hi"}))
    assert recorder is not None
    recorder.whole(orjson.dumps(response("resp_1", "a")))
    assert len(none_kept.store) == 0
