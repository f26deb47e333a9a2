"""A request body's Content-Encoding undone (``web/content_coding.py``): gzip and deflate,
stacked, with the request size limit and the event loop's budget.

The input's first byte picks the Content-Encoding value (``CODINGS``), the rest is the body.
Properties: only the project's errors (4xx) escape; no more than the limit is ever produced;
with a budget the answer is the same (or the same refusal), unless the budget was passed
(LargeWork, and only then); and ``inflate`` (the loop's way: within the budget here, else on
the request-work threads) gives what ``inflated`` gives.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rosettaserve.core.errors import ServingError
from rosettaserve.core.executor import LargeWork
from rosettaserve.web import content_coding
from tests.fuzz.targets.refusals import assert_a_refusal

CODINGS = (
    "gzip",
    "deflate",
    "x-gzip",
    "gzip, gzip",
    "deflate, gzip",
    "gzip, identity",
    "identity",
    "GZIP ,deflate",
    "gzip, gzip, gzip",
    "br",
    "gzip, br",
    "",
)
LIMIT = 64 * 1024
BUDGET = 2 * 1024


def undone(encoding: str, body: bytes, budget: int | None) -> tuple[str, Any]:
    try:
        out = content_coding.inflated(encoding, body, LIMIT, budget)
    except LargeWork:
        assert budget is not None, "LargeWork without a budget"
        return "larger than the budget", None
    except ServingError as exc:
        assert_a_refusal(exc)
        return "refused", (type(exc).__name__, exc.http_status)
    assert len(out) <= LIMIT, f"{len(out)} bytes past the limit of {LIMIT}"
    return "inflated", bytes(out)


def on_the_loop(encoding: str, body: bytes) -> tuple[str, Any]:
    async def main() -> tuple[str, Any]:
        try:
            out = await content_coding.inflate(encoding, body, LIMIT)
        except ServingError as exc:
            return "refused", (type(exc).__name__, exc.http_status)
        return "inflated", bytes(out)

    return asyncio.run(main())


def check(data: bytes) -> None:
    if not data:
        return
    encoding, body = CODINGS[data[0] % len(CODINGS)], data[1:]
    whole = undone(encoding, body, None)
    budgeted = undone(encoding, body, BUDGET)
    if budgeted[0] != "larger than the budget":
        assert budgeted == whole, (budgeted, whole)
    elif whole[0] == "inflated":
        assert len(whole[1]) > BUDGET or encoding.count(",") >= 1, "LargeWork within the budget"
    assert on_the_loop(encoding, body) == whole
