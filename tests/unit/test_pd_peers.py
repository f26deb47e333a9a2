"""The peers a PD instance may contact (pd/peers.py): ``--peer-allow`` entries read in every
form, addresses compared in canonical form, DNS names looked up (again when stale, and when an
address is missing, at most once a second), and a name a request chose never looked up."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Coroutine
from typing import Any

import pytest

from rosettaserve.cli.parser import build_parser
from rosettaserve.pd.discovery import every_address
from rosettaserve.pd.http_client import Address
from rosettaserve.pd.peers import ANY_PORT, KnownPeers, Peer, UnknownPeer, canonical, parse_peer


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 10))


class Names:
    """A name map the test edits, and the look-ups made; a name it lacks fails as DNS would."""

    def __init__(self, **names: list[str]) -> None:
        self.names = dict(names)
        self.lookups: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        await asyncio.sleep(0)
        if host not in self.names:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(self.names[host])


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def known(*peers: str, names: Names | None = None, clock: Clock | None = None) -> KnownPeers:
    return KnownPeers(
        map(parse_peer, peers), resolver=names or Names(), interval=10.0, clock=clock or Clock()
    )


async def admitted(peers: KnownPeers, host: str, port: int) -> bool:
    try:
        await peers.admit(Address(host, port), "decode instance")
    except UnknownPeer:
        return False
    return True


@pytest.mark.parametrize(
    ("text", "peer"),
    [
        ("10.0.0.4:8000", Peer("10.0.0.4", 8000)),
        ("10.0.0.4", Peer("10.0.0.4", ANY_PORT)),
        ("http://10.0.0.4:8000", Peer("10.0.0.4", 8000)),
        ("https://decode-headless:8443/", Peer("decode-headless", 8443)),
        ("http://Decode.NS.svc.cluster.local.", Peer("decode.ns.svc.cluster.local", ANY_PORT)),
        ("[::1]:8101", Peer("::1", 8101)),
        ("[::1]", Peer("::1", ANY_PORT)),
        ("::1", Peer("::1", ANY_PORT)),
        ("[0:0:0:0:0:0:0:1]:9", Peer("::1", 9)),
        ("[::ffff:10.0.0.4]:8000", Peer("10.0.0.4", 8000)),  # IPv4-mapped: its IPv4 address
        ("LocalHost:8101", Peer("localhost", 8101)),
        (" 127.0.0.1:1 ", Peer("127.0.0.1", 1)),
    ],
)
def test_a_peer_is_read_in_every_form(text: str, peer: Peer) -> None:
    assert parse_peer(text) == peer


@pytest.mark.parametrize(
    "text",
    ["", "10.0.0.4:0", "10.0.0.4:70000", "10.0.0.4:http", "ftp://h:1", "http://h:1/path",
     "http://h:1?q", "[::1]x", "bad host:1", "h/../x:1", "a" * 300],
)  # fmt: skip
def test_a_malformed_peer_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"peer|host"):
        parse_peer(text)


def test_the_flag_takes_several_peers_and_names_a_bad_one() -> None:
    parser = build_parser()
    args = parser.parse_args(
        ["serve", "R", "--peer-allow", "10.0.0.4:8000", "dec:1", "--peer-allow", "[::1]:2"]
    )
    assert args.peer_allow == ["10.0.0.4:8000", "dec:1", "[::1]:2"]
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "R", "--peer-allow", "10.0.0.4:99999"])


def test_addresses_compare_in_canonical_form() -> None:
    assert canonical("[::1]") == canonical("0::1") == "::1"
    assert canonical("::ffff:127.0.0.1") == "127.0.0.1"
    assert canonical("Decode.Local.") == "decode.local"

    async def scenario() -> list[bool]:
        peers = known("127.0.0.1:8101", "[::1]:8102", "10.0.0.9")
        return [
            await admitted(peers, "127.0.0.1", 8101),
            await admitted(peers, "::ffff:127.0.0.1", 8101),
            await admitted(peers, "[::1]", 8102),
            await admitted(peers, "0:0::1", 8102),
            await admitted(peers, "10.0.0.9", 1),  # a host alone: any port
            await admitted(peers, "10.0.0.9", 65535),
            await admitted(peers, "127.0.0.1", 8102),  # another port of a known host
            await admitted(peers, "127.0.0.2", 8101),
            await admitted(peers, "::1", 8101),
        ]

    assert run(scenario()) == [True] * 6 + [False] * 3


def test_no_peer_given_refuses_every_address_and_says_why() -> None:
    async def scenario() -> str:
        peers = known()
        assert not peers
        with pytest.raises(UnknownPeer) as refused:
            await peers.admit(Address("127.0.0.1", 8102), "decode instance")
        assert refused.value.http_status == 403
        return refused.value.message

    message = run(scenario())
    assert message == (
        "decode instance 127.0.0.1:8102 is not a known peer of this instance (--peer-allow: none)"
    )


def test_a_name_stands_for_every_address_it_resolves_to() -> None:
    names = Names(**{"decode-headless": ["10.0.0.4", "10.0.0.5", "fd00::5"],
                     "localhost": ["127.0.0.1", "::1"]})  # fmt: skip

    async def scenario() -> list[bool]:
        peers = known("decode-headless:8000", "localhost:8101", names=names)
        return [
            await admitted(peers, "10.0.0.5", 8000),
            await admitted(peers, "fd00::5", 8000),
            await admitted(peers, "127.0.0.1", 8101),
            await admitted(peers, "::1", 8101),
            await admitted(peers, "10.0.0.5", 8001),
            await admitted(peers, "127.0.0.1", 8000),
        ]

    assert run(scenario()) == [True] * 4 + [False] * 2


def test_a_name_a_request_chose_is_never_looked_up() -> None:
    names = Names(**{"prefill-a": ["10.0.0.3"], "evil.example": ["10.0.0.3"]})

    async def scenario() -> list[bool]:
        peers = known("prefill-a:8000", "10.0.0.3:8000", names=names)
        return [
            await admitted(peers, "prefill-a", 8000),  # the very name given: connect by it
            await admitted(peers, "PREFILL-A.", 8000),
            await admitted(peers, "evil.example", 8000),  # resolves to a peer, but unasked
            await admitted(peers, "prefill-a", 8001),
            await admitted(peers, "not a host", 8000),
        ]

    assert run(scenario()) == [True, True, False, False, False]
    assert "evil.example" not in names.lookups


def test_a_new_address_is_found_by_looking_again_at_most_once_a_second() -> None:
    names = Names(decode=["10.0.0.4"])
    clock = Clock()

    async def scenario() -> list[bool]:
        peers = known("http://decode:8000", names=names, clock=clock)
        seen = [await admitted(peers, "10.0.0.4", 8000)]
        names.names["decode"] = ["10.0.0.4", "10.0.0.5"]  # a pod joins the name
        seen.append(await admitted(peers, "10.0.0.5", 8000))  # within the second: not yet
        clock.now += 1.0
        seen.append(await admitted(peers, "10.0.0.5", 8000))  # looked up again, found
        seen.append(await admitted(peers, "10.0.0.6", 8000))  # within the second: no look-up
        clock.now += 1.0
        seen.append(await admitted(peers, "10.0.0.6", 8000))  # a look-up, still unknown
        return seen

    assert run(scenario()) == [True, False, True, False, False]
    assert names.lookups == ["decode"] * 3


def test_a_stale_name_is_looked_up_again_and_a_failed_look_up_keeps_its_addresses() -> None:
    """And an address that leaves the name stays known one round more."""
    names = Names(decode=["10.0.0.4"])
    clock = Clock()

    async def scenario() -> list[bool]:
        peers = known("decode:8000", names=names, clock=clock)
        seen = [await admitted(peers, "10.0.0.4", 8000)]
        del names.names["decode"]  # DNS fails: the addresses it had stay
        clock.now += 10.0
        seen.append(await admitted(peers, "10.0.0.4", 8000))
        names.names["decode"] = ["10.0.0.7"]  # the pod left the name
        clock.now += 10.0
        seen.append(await admitted(peers, "10.0.0.7", 8000))
        seen.append(await admitted(peers, "10.0.0.4", 8000))  # one round more: it drains
        clock.now += 10.0
        seen.append(await admitted(peers, "10.0.0.4", 8000))
        seen.append(await admitted(peers, "10.0.0.7", 8000))
        return seen

    assert run(scenario()) == [True, True, True, True, False, True]


def test_concurrent_misses_share_one_look_up() -> None:
    names = Names(decode=["10.0.0.4"])

    async def scenario() -> list[bool]:
        peers = known("decode:8000", names=names)
        return list(await asyncio.gather(*(admitted(peers, "10.0.0.9", 8000) for _ in range(20))))

    assert run(scenario()) == [False] * 20
    assert names.lookups == ["decode"]


def test_the_real_resolver_gives_every_address_of_a_name() -> None:
    async def scenario() -> tuple[list[str], bool, bool]:
        addresses = await every_address("localhost", 8101)
        peers = KnownPeers([parse_peer("localhost:8101")])  # the real resolver, off the loop
        return (
            addresses,
            await admitted(peers, "127.0.0.1", 8101),
            await admitted(peers, "127.0.0.1", 8102),
        )

    addresses, ok, other_port = run(scenario())
    assert "127.0.0.1" in addresses
    assert (ok, other_port) == (True, False)
