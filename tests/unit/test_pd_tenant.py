"""Fair share between API keys through prefill/decode: the scheduler names its client's key's
tenant to P (``pd-tenant``, wire.py; a client's own copy is dropped), P queues the request under
it only on a peer's word (prefill.py), and D under what P hands it (decode.py)."""

from __future__ import annotations

import asyncio
import contextvars
import math
from typing import Any

import httpx
import orjson
import pytest

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.share import DEFAULT, SHARE, Share
from rosettaserve.pd import wire
from rosettaserve.pd.decode import DecodeRole, parse_decode_params
from rosettaserve.pd.http_client import Address, PeerClient
from rosettaserve.pd.options import PdOptions, SchedulerOptions
from rosettaserve.pd.peers import KnownPeers
from rosettaserve.pd.prefill import PrefillRole
from rosettaserve.pd.scheduler import Scheduler
from rosettaserve.security.keys import Guard
from rosettaserve.transport.h1 import HttpServer
from rosettaserve.web.app import HttpApp
from rosettaserve.web.routing import HttpRequest, HttpResponse
from tests.unit.test_pd_decode_params import GOOD as DECODE_PARAMS
from tests.unit.test_pd_scheduler import FakeDecode, FakePrefill, listen, reply, serve, stop
from tests.unit.test_pd_wire import GOOD

PEER_KEY = "the-instances-own-key"


def fields(share: Share | None) -> tuple[str, float, int] | None:
    return None if share is None else (share.tenant, share.weight, share.priority)


# -- the header ----------------------------------------------------------------------------------


def test_the_tenant_header_names_the_key_by_its_place_with_its_weight() -> None:
    assert wire.tenant_header(DEFAULT) == {}  # no keys: nothing is said
    assert wire.tenant_header(DEFAULT.prioritised(-4)) == {}
    sent = wire.tenant_header(Share("key#2", 2.5, 7))  # (the priority travels on its own)
    assert sent == {"pd-tenant": "key#2;weight=2.5"}
    pd = wire.parse_prefill_headers(GOOD | sent)
    assert pd.tenant == wire.Tenant("key#2", 2.5)
    assert fields(pd.tenant.share(-1)) == ("pd:key#2", 2.5, -1)  # never one of P's own keys
    assert wire.parse_prefill_headers(GOOD).tenant is None
    for weight in (1e-6, 1 / 3, 1e6):  # any key file weight goes through exactly
        text = wire.tenant_header(Share("key#10", weight, 0))["pd-tenant"]
        assert wire.parse_tenant(text) == wire.Tenant("key#10", weight)
    assert wire.parse_tenant(" key#3 ; weight=4 ") == wire.Tenant("key#3", 4.0)
    assert wire.parse_tenant("key#3") == wire.Tenant("key#3", 1.0)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", r"name is 1 to 64 letters, digits or '_.:#-', got ''$"),
        ("k" * 65, r"name is 1 to 64 .*got 'k{40}'\.\.\.$"),
        ("key 1", "name is 1 to 64"),
        ("key#1;4", r"must be '<name>' or '<name>;weight=<w>', got 'key#1;4'$"),
        ("key#1;weight=", "weight is a number, got ''"),
        ("key#1;weight=nan", "weight is a number, got 'nan'"),
        ("key#1;weight=inf", "weight is a number"),
        ("key#1;weight=-2", "weight is a number"),
        ("key#1;weight=1_0", "weight is a number"),
        ("key#1;weight=0", r"weight must be in \(0, 1e\+06\], got 0.0$"),
        ("key#1;weight=1000000.5", r"weight must be in \(0, 1e\+06\], got 1000000.5$"),
        ("key#1;weight=9e999", r"got inf$"),
        ("key#1;weight=" + "9" * 40, "weight is a number"),
    ],
)
def test_a_malformed_tenant_header_is_a_400_naming_it(value: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as refused:
        wire.parse_prefill_headers(GOOD | {"pd-tenant": value})
    assert refused.value.http_status == 400
    assert "header 'pd-tenant'" in refused.value.message


def test_the_decode_parameters_carry_the_tenant_checked_the_same() -> None:
    def parse(**extra: Any) -> Any:
        return parse_decode_params(orjson.dumps(DECODE_PARAMS | extra), 1 << 20)

    assert parse().tenant is None  # (a prefill instance from before tenants, or no keys)
    assert parse(tenant="key#2", weight=0.5).tenant == wire.Tenant("key#2", 0.5)
    assert parse(tenant="key#2").tenant == wire.Tenant("key#2", 1.0)
    refusals: list[tuple[dict[str, Any], str]] = [
        ({"tenant": "a b"}, "'tenant': a tenant's name is 1 to 64"),
        ({"tenant": 3}, "'tenant' must be a string"),
        ({"tenant": "k", "weight": 0}, r"'weight' must be in \(0.0, 1000000.0\]"),
        ({"tenant": "k", "weight": True}, "'weight' must be a finite number"),
        ({"tenant": "k", "weight": 1e7}, "'weight' must be in"),
    ]
    for bad, says in refusals:
        with pytest.raises(InvalidInput, match=f"^malformed decode parameters: {says}"):
            parse(**bad)
    assert math.isclose(parse(tenant="k", weight=1e6).tenant.weight, 1e6)


# -- the scheduler names it ----------------------------------------------------------------------


async def _scheduler_sends(guard: Guard | None, key: str | None) -> dict[str, str]:
    """The headers P gets for one request a client sends with ``key`` and a forged
    ``pd-tenant``, through a scheduler that checks keys with ``guard``."""

    async def script(req: HttpRequest) -> HttpResponse:
        return reply(req, b'{"text": "done"}', last=True, stream=False)

    p, d = FakePrefill(script), FakeDecode()
    servers: list[HttpServer] = []
    for fake in (p, d):
        fake.url, server = await serve(fake.routes())
        servers.append(server)
    scheduler = Scheduler(SchedulerOptions((p.url,), (d.url,)), PeerClient(api_key=PEER_KEY))
    app = HttpApp(scheduler.routes())
    app.guard = guard
    front, sock = HttpServer(app, 1 << 20), listen()
    await front.start(sock)
    servers.append(front)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    scheduler.pool.poll_s = 0.05
    scheduler.pool.start()
    headers = {"pd-tenant": "key#9;weight=1000000", "x-priority": "3"}
    headers |= {"authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient() as client:
        while (await client.get(url + "/v2/health/ready", headers=headers)).status_code != 200:
            await asyncio.sleep(0.01)
        body = {"model": "m", "prompt": "hi"}
        answer = await client.post(url + "/v1/completions", json=body, headers=headers)
    await stop(scheduler, servers)
    assert answer.status_code == 200, answer.text
    (sent,) = p.seen
    return sent.headers


def test_the_scheduler_names_its_clients_key_and_drops_a_clients_own_header() -> None:
    guard = Guard(["key-of-a-client", "key-of-b-client"], {"key-of-b-client": 2.0})
    sent = asyncio.run(asyncio.wait_for(_scheduler_sends(guard, "key-of-b-client"), 30))
    assert sent["pd-tenant"] == "key#2;weight=2.0"  # the key's place, never the key
    assert "key-of-b-client" not in str(sent)
    assert sent["authorization"] == f"Bearer {PEER_KEY}"
    assert sent["x-priority"] == "3"


def test_without_keys_the_scheduler_says_nothing_of_tenants() -> None:
    sent = asyncio.run(asyncio.wait_for(_scheduler_sends(None, None), 30))
    assert "pd-tenant" not in sent  # the client's forged one is dropped too
    assert sent["x-priority"] == "3"


# -- P takes it from a peer only -----------------------------------------------------------------


class _Ready:
    def ready(self) -> bool:
        return True


class _Plane:
    dataplane = _Ready()


class _Endpoint:
    """The family's endpoint: records the request's place in the queues (core/share.py)."""

    def __init__(self) -> None:
        self.queued: Share | None = None

    async def serve(self, plane: Any, req: HttpRequest, split: Any) -> HttpResponse:
        self.queued = SHARE.get()
        return HttpResponse(200, b"{}", "application/json")


def _queued_at_p(edge: Share, headers: dict[str, str], peer_key: str = PEER_KEY) -> Share | None:
    """What P's engine would queue a request under: ``edge`` is what P's own key check set,
    ``headers`` the request's beside the PD headers (d-target: P itself, served whole)."""
    client = PeerClient(api_key=peer_key)
    role = PrefillRole(_Plane(), PdOptions(), KnownPeers([]), client)  # type: ignore[arg-type]
    role.address = Address("172.17.0.9", 1025)  # GOOD's d-target: served whole here
    endpoint = _Endpoint()
    req = HttpRequest("POST", "/v1/completions", b"", GOOD | headers, b"{}")

    async def run() -> None:
        SHARE.set(edge)
        await role.serve(endpoint, req)  # type: ignore[arg-type]

    contextvars.copy_context().run(asyncio.run, run())
    return endpoint.queued


TENANT = {"pd-tenant": "key#2;weight=3"}
PEER = Share("key#1", 1.0, -2)  # P's own tenant for its peer key (priority: X-Priority's)


def test_p_queues_a_peers_request_under_the_schedulers_tenant() -> None:
    by_peer = _queued_at_p(PEER, TENANT | {"authorization": f"Bearer {PEER_KEY}"})
    assert fields(by_peer) == ("pd:key#2", 3.0, -2)
    also = _queued_at_p(PEER, TENANT | {"x-api-key": PEER_KEY})
    assert fields(also) == ("pd:key#2", 3.0, -2)
    # no keys at P: whoever reaches its (private) port is taken as a peer, as for every PD header
    open_port = _queued_at_p(DEFAULT, TENANT, peer_key="")
    assert fields(open_port) == ("pd:key#2", 3.0, 0)


def test_p_ignores_a_tenant_from_anyone_but_a_peer(caplog: pytest.LogCaptureFixture) -> None:
    client = Share("key#3", 1.0, 0)  # a key of P's own that is not its peer key
    forged = _queued_at_p(client, TENANT | {"authorization": "Bearer someone-elses-key"})
    assert forged is client
    assert "not this instance's --peer-api-key: ignored" in caplog.text
    no_peer_key = _queued_at_p(PEER, TENANT | {"authorization": f"Bearer {PEER_KEY}"}, "")
    assert no_peer_key is PEER  # P cannot tell its peer key: it trusts none
    assert _queued_at_p(PEER, {"authorization": f"Bearer {PEER_KEY}"}) is PEER  # none sent


def test_p_refuses_a_malformed_tenant_even_from_a_peer() -> None:
    with pytest.raises(InvalidInput, match="header 'pd-tenant'"):
        _queued_at_p(PEER, {"pd-tenant": "key#2;weight=0", "x-api-key": PEER_KEY})


# -- D queues the job under what P handed it -----------------------------------------------------


class _Confirming(PeerClient):
    """P's answer to D's fetch: no cache (D recomputes), and so the hand-over is P's."""

    async def fetch(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, str], bytes]:
        return 200, {}, b""


def _queued_at_d(edge: Share, **extra: Any) -> Share | None:
    """What D's engine would queue a job under: ``edge`` is what D's key check set for P."""
    role = DecodeRole(_Plane(), PdOptions(), KnownPeers([]), _Confirming())  # type: ignore[arg-type]
    params = parse_decode_params(orjson.dumps(DECODE_PARAMS | {"kvBytes": 0} | extra), 1 << 20)
    endpoint = _Endpoint()
    req = HttpRequest("POST", params.path, b"", {}, params.body)

    async def run() -> None:
        SHARE.set(edge)
        await role._job(params, endpoint, req)  # type: ignore[arg-type]

    contextvars.copy_context().run(asyncio.run, run())
    return endpoint.queued


def test_d_queues_a_job_under_the_tenant_p_handed_it() -> None:
    assert fields(_queued_at_d(PEER, tenant="key#2", weight=3, priority=-1)) == (
        "pd:key#2", 3.0, -1,
    )  # fmt: skip
    # none handed (no keys at the scheduler): as before, P's key at D, with the priority
    assert fields(_queued_at_d(PEER, priority=-1)) == ("key#1", 1.0, -1)
    assert _queued_at_d(PEER) is PEER
