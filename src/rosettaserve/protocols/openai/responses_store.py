"""The Responses API's stored responses, in one form wherever they are kept: in a mixed
instance's generation plane, or in the scheduler under prefill/decode disaggregation
(pd/responses_kept.py), where no instance holds a whole exchange.

An entry holds the response and the input items a later request continues from when it names
it as ``previous_response_id``: the earlier exchange's items, the request's own input, then
the response's output items (an output item is an input item too: a ``message`` with
``output_text`` parts, or a ``function_call``). The instructions are not kept.
"""

from __future__ import annotations

from typing import Any

from rosettaserve.core.bounded_store import BoundedStore
from rosettaserve.core.errors import NotFound
from rosettaserve.web.routing import HttpResponse, json_response

Store = BoundedStore[Any]


def input_items(value: Any) -> list[Any]:
    """A request's ``input`` as a list of items (a string is one user message)."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


def earlier(store: Store, previous_response_id: str | None) -> list[Any]:
    """The items of the exchange ``previous_response_id`` names ([] when none)."""
    if previous_response_id is None:
        return []
    items: list[Any] = _found(store, previous_response_id)["items"]
    return items


def keep(store: Store, response: dict[str, Any], items: list[Any]) -> None:
    """Keep ``response``, made from ``items`` (the earlier exchange's and the input's)."""
    store.put(response["id"], {"response": response, "items": [*items, *response["output"]]})


def retrieved(store: Store, response_id: str) -> HttpResponse:
    """``GET /v1/responses/{id}``."""
    return json_response(_found(store, response_id)["response"])


def deleted(store: Store, response_id: str) -> HttpResponse:
    """``DELETE /v1/responses/{id}``."""
    _found(store, response_id)
    store.pop(response_id)
    return json_response({"id": response_id, "object": "response.deleted", "deleted": True})


def _found(store: Store, response_id: str) -> dict[str, Any]:
    found: dict[str, Any] | None = store.get(response_id)
    if found is None:
        raise NotFound(f"Response with id '{response_id}' not found.")
    return found
