"""What the API key check costs per request, in-process.

    .venv/bin/python bench/api_key_cost.py [--number 200000] [--repeat 7]

Times ``Guard.admits_http`` (the whole check: the header looked up, the key hashed once, its
digest compared in constant time with every configured key) with 1 and 3 keys configured, and
``HttpApp.respond`` on a route answering at once, with no key configured and with one (the
request carrying the right key): the difference is what a request pays. Prints the best of
``--repeat`` rounds, in microseconds per call.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import timeit

from rosettaserve.security.keys import Guard
from rosettaserve.web.app import HttpApp
from rosettaserve.web.routing import HttpRequest, HttpResponse, Route

KEYS = ("k1-" + "a" * 40, "k2-" + "b" * 40, "k3-" + "c" * 40)
HEADERS = {"host": "bench", "content-type": "application/json", "content-length": "10"}
ANSWER = HttpResponse(200, b"{}")


async def answer(req: HttpRequest) -> HttpResponse:
    return ANSWER


def best(stmt: object, number: int, repeat: int) -> float:
    return min(timeit.repeat(stmt, number=number, repeat=repeat)) / number * 1e6  # type: ignore[arg-type]


def respond_cost(app: HttpApp, headers: dict[str, str], number: int, repeat: int) -> float:
    url = b"/v2/models/identity/infer"

    def once() -> None:
        coro = app.respond("POST", url, headers, b"")
        with contextlib.suppress(StopIteration):
            coro.send(None)

    return best(once, number, repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--number", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    n, r = args.number, args.repeat
    pattern = "/v2/models/(?P<model>[^/]+)/infer"
    bearer = {**HEADERS, "authorization": f"Bearer {KEYS[0]}"}
    for count in (1, 3):
        check = Guard(KEYS[:count]).admits_http
        cost = best(lambda c=check: c("POST", pattern, bearer), n, r)  # type: ignore[misc]
        print(f"Guard.admits_http, {count} key(s), Authorization: Bearer: {cost:.3f} us")
    guard = Guard(KEYS[:1])
    by_header = {**HEADERS, "x-api-key": KEYS[0]}
    cost = best(lambda: guard.admits_http("POST", pattern, by_header), n, r)
    print(f"Guard.admits_http, 1 key, x-api-key: {cost:.3f} us")
    app = HttpApp([Route("POST", pattern, answer)])
    plain = respond_cost(app, bearer, n, r)
    app.guard = guard
    guarded = respond_cost(app, bearer, n, r)
    print(f"HttpApp.respond, no key configured: {plain:.3f} us")
    print(f"HttpApp.respond, 1 key configured, the right key sent: {guarded:.3f} us")
    print(f"the check per request: {guarded - plain:.3f} us")


if __name__ == "__main__":
    asyncio.set_event_loop(asyncio.new_event_loop())
    main()
