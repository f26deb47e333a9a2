"""The Responses API's store under prefill/decode disaggregation: the two halves of a request
run on two instances, neither holding the whole exchange, so the scheduler keeps the responses
(``--responses-store N``, the store a mixed instance keeps: protocols/openai/responses_store.py).

A ``POST /v1/responses`` naming ``previous_response_id`` has the kept exchange's items put
before its input here, so the instances continue it without a store; the reply (the JSON
answer, or a stream's final ``response.completed`` / ``response.incomplete`` event, read as
the chunks pass to the client, never held back) is kept when it says ``store: true``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from rosettaserve.core.bounded_store import BoundedStore
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import json_object
from rosettaserve.protocols.openai import responses
from rosettaserve.protocols.openai.responses_store import Store, earlier, input_items, keep
from rosettaserve.web.routing import HttpRequest

PATH = responses.ENDPOINTS[0].pattern
FINAL = (b"event: response.completed\n", b"event: response.incomplete\n")
KEPT_STATUSES = ("completed", "incomplete")


class Recorder:
    """Keeps one request's response, made from ``items`` (the earlier exchange's and its input)."""

    def __init__(self, store: Store, items: list[Any]) -> None:
        self.store, self.items = store, items
        self.rest = b""  # a stream's event not whole yet

    def whole(self, body: bytes) -> None:
        try:
            self._keep(orjson.loads(body))
        except orjson.JSONDecodeError:
            return

    def _keep(self, response: Any) -> None:
        if (
            isinstance(response, dict)
            and response.get("store") is True
            and response.get("status") in KEPT_STATUSES
        ):
            keep(self.store, response, self.items)

    async def observe(self, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """The stream unchanged; its final response is kept before that event goes on."""
        async for chunk in stream:
            self.seen(chunk)
            yield chunk

    def seen(self, chunk: bytes) -> None:
        *whole, self.rest = (self.rest + chunk).split(b"\n\n")
        for e in whole:
            if e.startswith(FINAL):
                _, _, data = e.partition(b"data: ")
                try:
                    self._keep(orjson.loads(data).get("response"))
                except (orjson.JSONDecodeError, AttributeError):
                    continue


class Kept:
    """The scheduler's store of responses."""

    def __init__(self, capacity: int) -> None:
        self.store: Store = BoundedStore(capacity)

    def prepare(self, req: HttpRequest) -> tuple[bytes, Recorder | None]:
        """The body to forward (the earlier exchange put into its input) and what keeps the
        reply; a request that is no Responses request goes on unchanged."""
        if req.path != PATH:
            return bytes(req.body), None
        try:
            doc = json_object(req.body)
        except InvalidInput:  # the instance refuses it in its own words
            return bytes(req.body), None
        given, previous = doc.get("input"), doc.get("previous_response_id")
        if not isinstance(given, (str, list)):  # the instance refuses it in its own words
            return bytes(req.body), None
        items = earlier(self.store, previous if isinstance(previous, str) and previous else None)
        mine = [*items, *input_items(given)]
        # previous_response_id stays: the instances echo it, and read no store under PD
        body = orjson.dumps(doc | {"input": mine}) if items else bytes(req.body)
        return body, Recorder(self.store, mine)
