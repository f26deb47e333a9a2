"""The scheduler's instances by DNS name: a URL whose host is a name stands for every address
the name resolves to, looked up again and again; instances come and go with the addresses.
The resolver here is a function the test controls (the multi-host tests use the real one)."""

from __future__ import annotations

import asyncio
import functools
import socket
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from rosettaserve.cli.parser import build_parser
from rosettaserve.pd.discovery import is_name, resolve
from rosettaserve.pd.http_client import PeerClient
from rosettaserve.pd.pool import Instance, Pool


def sync(scenario: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """The test runs ``scenario`` on its own event loop, 30 s at most."""

    @functools.wraps(scenario)
    def test() -> None:
        asyncio.run(asyncio.wait_for(scenario(), 30))

    return test


class Names:
    """A name map the test edits; looking up a name it lacks fails as DNS would."""

    def __init__(self, **names: list[str]) -> None:
        self.names = dict(names)
        self.lookups: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append((host, port))
        await asyncio.sleep(0)  # a look-up is a suspension point, as loop.getaddrinfo is
        if host not in self.names:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(self.names[host])


def pool_of(names: Names, prefill: list[str], decode: list[str]) -> Pool:
    return Pool(
        prefill,
        decode,
        "round-robin",
        on_frame=lambda d, f: None,
        on_lost=lambda d, why: None,
        client=PeerClient(),
        resolver=names,
        discovery_s=0.01,
    )


def urls(instances: list[Instance]) -> list[str]:
    return sorted(i.url for i in instances if i.listed)


def test_names_and_addresses_are_told_apart() -> None:
    assert is_name("decode-headless")
    assert is_name("decode.ns.svc.cluster.local")
    assert not is_name("10.77.0.3")
    assert not is_name("::1")
    assert not is_name("fe80::1")


@sync
async def test_the_real_resolver_answers_without_blocking_and_prefers_ipv4() -> None:
    assert await resolve("localhost", 8000) == ["127.0.0.1"]
    assert await resolve("127.0.0.1", 8000) == ["127.0.0.1"]
    assert await resolve("::1", 8000) == ["::1"]  # no IPv4 address: the IPv6 ones
    with pytest.raises(socket.gaierror):
        await resolve("no-such-host.invalid", 8000)


@sync
async def test_a_name_becomes_one_instance_per_address() -> None:
    names = Names(prefill=["10.0.0.2"], decode=["10.0.0.4", "10.0.0.3"])
    pool = pool_of(names, ["http://prefill:8000"], ["http://decode:9000", "http://10.0.0.9:9000"])
    assert urls(pool.prefill) == []
    assert urls(pool.decode) == ["http://10.0.0.9:9000"]
    await pool.discover()
    assert names.lookups == [("prefill", 8000), ("decode", 9000)]
    assert urls(pool.prefill) == ["http://10.0.0.2:8000"]
    assert urls(pool.decode) == [
        "http://10.0.0.3:9000",
        "http://10.0.0.4:9000",
        "http://10.0.0.9:9000",
    ]
    assert {i.source for i in pool.decode} == {"http://decode:9000", ""}
    view = pool.decode[-1].view()
    assert view["source"] == "http://decode:9000"
    assert view["listed"] is True


@sync
async def test_instances_come_and_go_with_the_addresses() -> None:
    names = Names(prefill=["10.0.0.2"], decode=["10.0.0.3"])
    pool = pool_of(names, ["http://prefill:8000"], ["http://decode:9000"])
    await pool.discover()
    first = pool.decode[0]
    names.names["decode"] = ["10.0.0.3", "10.0.0.5"]  # a pod was added
    names.names["prefill"] = ["10.0.0.6"]  # a pod was replaced
    await pool.discover()
    assert urls(pool.decode) == ["http://10.0.0.3:9000", "http://10.0.0.5:9000"]
    assert pool.decode[0] is first  # an instance that stays is the same (its load, its health)
    assert urls(pool.prefill) == ["http://10.0.0.6:8000"]
    names.names["decode"] = ["10.0.0.5"]
    await pool.discover()
    assert urls(pool.decode) == ["http://10.0.0.5:9000"]
    assert first not in pool.decode  # it held nothing: gone at once


@sync
async def test_a_leaving_decode_instance_finishes_its_requests_first() -> None:
    names = Names(decode=["10.0.0.3", "10.0.0.4"])
    pool = pool_of(names, ["http://10.0.0.2:8000"], ["http://decode:9000"])
    await pool.discover()
    leaving, staying = pool.decode
    for i in pool.decode:
        i.healthy = True
    leaving.active = 1  # a request of this scheduler is being decoded there
    names.names["decode"] = ["10.0.0.4"]
    await pool.discover()
    assert leaving in pool.decode
    assert not leaving.listed
    assert {pool.pick_decode(set()) for _ in range(4)} == {staying}  # nothing new goes there
    names.names["decode"] = ["10.0.0.3", "10.0.0.4"]  # back before it was dropped
    await pool.discover()
    assert leaving.listed
    names.names["decode"] = ["10.0.0.4"]
    await pool.discover()
    leaving.active = 0
    await pool.discover()
    assert pool.decode == [staying]


@sync
async def test_a_failed_lookup_keeps_the_instances_it_had() -> None:
    names = Names(decode=["10.0.0.3"])
    pool = pool_of(names, ["http://10.0.0.2:8000"], ["http://decode:9000"])
    await pool.discover()
    del names.names["decode"]
    await pool.discover()
    assert urls(pool.decode) == ["http://10.0.0.3:9000"]


@sync
async def test_an_address_given_twice_is_one_instance_and_the_scheme_stays() -> None:
    names = Names(decode=["10.0.0.3"], secure=["10.0.0.7"])
    pool = pool_of(
        names,
        ["https://secure:8443"],
        ["http://10.0.0.3:9000", "http://decode:9000", "http://10.0.0.3:9000"],
    )
    await pool.discover()
    assert urls(pool.decode) == ["http://10.0.0.3:9000"]
    assert pool.decode[0].source == ""  # given as it is: never dropped by a look-up
    assert urls(pool.prefill) == ["https://10.0.0.7:8443"]


@sync
async def test_a_started_pool_watches_names_and_reads_each_new_decode_instance() -> None:
    # closed loopback ports: the /dresult readers fail to connect and try again, harmlessly
    names = Names(decode=["127.0.0.1"])
    pool = pool_of(names, ["http://127.0.0.1:1"], ["http://decode:2"])
    pool.start()
    try:
        for _ in range(500):  # bounded: the watch runs every 10 ms
            if pool.decode:
                break
            await asyncio.sleep(0.01)
        (first,) = pool.decode
        reader = pool._readers[first]
        names.names["decode"] = ["127.0.0.2"]
        for _ in range(500):
            if first not in pool.decode and pool.decode:
                break
            await asyncio.sleep(0.01)
        assert urls(pool.decode) == ["http://127.0.0.2:2"]
        await asyncio.wait([reader], timeout=5)
        assert reader.cancelled()  # the reader of an instance that left is stopped
        assert len(names.lookups) >= 2
    finally:
        await pool.stop()
    assert not pool._readers


def test_the_discovery_interval_option() -> None:
    parse = build_parser().parse_args
    base = ["scheduler", "--prefill", "http://prefill:8000", "--decode", "http://decode:8000"]
    assert parse(base).discovery_interval == 10.0
    assert parse([*base, "--discovery-interval", "2.5"]).discovery_interval == 2.5
    for bad in ("0", "-1"):
        with pytest.raises(SystemExit):
            parse([*base, "--discovery-interval", bad])
