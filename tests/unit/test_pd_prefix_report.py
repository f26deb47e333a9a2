"""A prefill instance's report of what its prefix cache holds (pd/prefix_report.py) follows the
cache as it inserts, evicts and clears; the scheduler reads it from the status and, under the
prefix policy, takes it over its own table for that instance (pd/prefix_affinity.py)."""

from __future__ import annotations

import asyncio
import base64
import contextvars
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import orjson
import torch

from rosettaserve.core.share import DEFAULT, SHARE, Share
from rosettaserve.pd.http_client import PeerClient
from rosettaserve.pd.instance import PdInstance
from rosettaserve.pd.options import PdOptions
from rosettaserve.pd.pool import Pool
from rosettaserve.pd.prefix_affinity import BLOCK, DIGEST, PrefixTable, prompt_blocks
from rosettaserve.pd.prefix_report import FIELD, MAX_REPORT, HeldPrefixes, read_report
from rosettaserve.runtimes.llm.prefix_cache import PrefixCache
from rosettaserve.web.routing import HttpRequest

PATH = "/v1/completions"
TOKENS = 64  # a prompt's tokens: 4 blocks of 16, as its text is 4 blocks of BLOCK characters


@dataclass
class Node:
    url: str
    outstanding: int = 0


def body(letter: str) -> bytes:
    return orjson.dumps({"prompt": letter * (4 * BLOCK)})


def ids(first: int, count: int = TOKENS) -> list[int]:
    return list(range(first, first + count))


def prefilled(cache: PrefixCache, tokens: list[int]) -> None:
    """What the engine does once a prompt is prefilled: its whole blocks go in the cache."""
    kv = [(torch.zeros(1, 1, len(tokens), 2), torch.zeros(1, 1, len(tokens), 2))]
    cache.insert(tokens, kv, len(tokens))


def test_the_report_follows_what_the_cache_inserts_evicts_and_clears() -> None:
    cache, held = PrefixCache(capacity=TOKENS, block=16), HeldPrefixes()
    a = prompt_blocks(PATH, body("a"))
    assert len(a) == 4
    prefilled(cache, ids(0))  # (recorded once the first token is out: the prompt is cached)
    held.record(PATH, body("a"), ids(0), cache)
    assert held.held() == a
    prefilled(cache, ids(1000, 32))  # 2 blocks in: a's last 2 blocks are evicted
    held.record(PATH, body("b"), ids(1000, 32), cache)
    b = prompt_blocks(PATH, body("b"))
    assert held.held() == b + a[:2]  # the newest prompt first, a's held half
    prefilled(cache, ids(2000))  # a whole new prompt: a and b are evicted whole
    assert held.held() == []
    assert len(held) == 0  # and forgotten
    held.record(PATH, body("c"), ids(2000), cache)
    assert held.held() == prompt_blocks(PATH, body("c"))
    held.record(PATH, body("d"), ids(3000), cache)  # a prompt that did not stay cached
    assert held.held() == prompt_blocks(PATH, body("c"))
    cache.clear()  # the model unloaded
    assert held.held() == []
    assert held.report() == ""


def test_the_report_is_bounded_and_shares_repeated_prefixes() -> None:
    cache, held = PrefixCache(capacity=10 * TOKENS, block=16), HeldPrefixes(max_prompts=2)
    for n, letter in enumerate("xyz"):
        prefilled(cache, ids(n * TOKENS))
        held.record(PATH, body(letter), ids(n * TOKENS), cache)
    assert len(held) == 2  # the oldest prompt is forgotten
    assert held.held(limit=5) == prompt_blocks(PATH, body("z")) + prompt_blocks(PATH, body("y"))[:1]
    held.record(PATH, body("z"), ids(2 * TOKENS), cache)  # the same prompt again: one entry
    assert len(held) == 2
    assert read_report({"prefill": {FIELD: held.report()}}) == frozenset(held.held())
    off, none = PrefixCache(capacity=0, block=16), HeldPrefixes()
    none.record(PATH, body("x"), ids(0), off)  # no prefix cache: nothing to report
    assert len(none) == 0


def test_a_malformed_report_is_no_report() -> None:
    digest = bytes(range(DIGEST))
    good = base64.b64encode(digest * 2).decode()
    assert read_report({"prefill": {FIELD: good}}) == frozenset({digest})
    assert read_report({"prefill": {FIELD: ""}}) == frozenset()  # holds nothing: a report
    too_long = base64.b64encode(b"\0" * DIGEST * (MAX_REPORT + 1)).decode()
    for doc in (
        None,
        [],
        {"prefill": {}},
        {"prefill": {FIELD: 3}},
        {"prefill": [FIELD]},
        {"prefill": {FIELD: "not base64!"}},
        {"prefill": {FIELD: base64.b64encode(b"\0" * (DIGEST + 1)).decode()}},
        {"prefill": {FIELD: too_long}},
        {"prefill": {FIELD: "é" * 8}},
    ):
        assert read_report(doc) is None, doc


def test_a_report_replaces_what_the_table_believed_of_that_instance() -> None:
    table, a, b = PrefixTable(), Node("a"), Node("b")
    blocks = prompt_blocks(PATH, body("a"))
    table.remember(blocks, "a")
    a.outstanding = 10  # busier than b, by less than the prefix the table gives it
    assert table.choose([a, b], blocks) is a
    table.report("a", frozenset(), table.stamp)  # a's cache evicted it
    assert table.matched(blocks) == {}
    assert table.choose([a, b], blocks) is b
    table.report("b", frozenset(blocks[:2]), table.stamp)  # b holds the first half
    assert table.matched(blocks) == {"b": 2 * BLOCK}
    stamp = table.stamp  # a report asked for before the next request was sent
    table.remember(blocks, "a")
    table.report("a", frozenset(), stamp)  # a's cache may not hold it yet: the table's word
    assert table.matched(blocks) == {"a": 4 * BLOCK, "b": 2 * BLOCK}
    table.report("a", None, table.stamp)  # a reports nothing any more: the table's guess
    table.report("b", None, table.stamp)
    assert table.matched(blocks) == {"a": 4 * BLOCK}


class StatusClient(PeerClient):
    def __init__(self, docs: dict[int, dict[str, Any]]) -> None:
        super().__init__()
        self.docs = docs  # port -> its status

    async def fetch(self, address: Any, method: str, path: str, **_: Any) -> Any:
        assert (method, path) == ("GET", "/v1/status")
        return 200, {}, orjson.dumps(self.docs[address.port])


def status(held: list[bytes] | None) -> dict[str, Any]:
    doc: dict[str, Any] = {"service": {"roleStatus": "RoleReady", "currentRole": "prefill"}}
    if held is not None:
        doc["prefill"] = {FIELD: base64.b64encode(b"".join(held)).decode()}
    return doc


def test_the_pool_chooses_by_the_status_reports_under_the_prefix_policy() -> None:
    blocks = prompt_blocks(PATH, body("a"))
    client = StatusClient({1: status([]), 2: status(blocks)})
    urls = ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    pool = Pool(urls, [], "prefix", on_frame=print, on_lost=print, client=client)
    p1, p2 = pool.prefill
    pool.prefixes.remember(blocks, p1.url)  # the table believes p1 holds it
    p2.outstanding = 3 * BLOCK  # busier, by less than the prefix is worth

    async def poll() -> None:
        await asyncio.gather(pool._status(p1), pool._status(p2))

    asyncio.run(poll())
    assert p1.healthy
    assert p2.healthy
    assert pool.pick_prefill(set(), blocks=lambda: blocks) is p2  # the reports win
    assert [p.view()["prefix_blocks"] for p in (p1, p2)] == [0, len(blocks)]
    assert [p.view()["statuses"] for p in (p1, p2)] == [1, 1]
    client.docs[2] = status(None)  # p2 no longer reports: the table's guess for it
    client.docs[1] = status(None)
    asyncio.run(poll())
    assert pool.pick_prefill(set(), blocks=lambda: blocks) is p2  # the table: p2 just got it


# -- the prefill instance's status carries the report, to its peers only -------------------------


class _Engine:
    def __init__(self, cache: PrefixCache | None) -> None:
        self.kv = None if cache is None else SimpleNamespace(prefix_cache=cache)
        self.stats = SimpleNamespace(running=0, waiting=0, kv_tokens=0, preempted=0)
        self.config = SimpleNamespace(max_num_seqs=4, kv_budget_tokens=0)

    def pd_engine(self) -> _Engine:
        return self


class _Plane:
    def __init__(self, *engines: _Engine) -> None:
        self.dataplane = SimpleNamespace(ready=lambda: True)
        self.registry = SimpleNamespace(model_names=list)
        self.engines = engines

    def generators(self) -> list[tuple[str, _Engine]]:
        return [(f"m{n}", e) for n, e in enumerate(self.engines)]


PEER_KEY = "the-instances-own-key"


def _status_doc(plane: _Plane, share: Share, key: str) -> dict[str, Any]:
    """``GET /v1/status`` of a prefill instance whose key check gave ``share``, asked with
    ``key``."""
    options = PdOptions(peer_allow=["127.0.0.1:1"])
    instance = PdInstance("prefill", options, plane, PeerClient(api_key=PEER_KEY))  # type: ignore[arg-type]
    assert instance.prefill is not None
    cache = PrefixCache(capacity=TOKENS, block=16)
    prefilled(cache, ids(0))
    instance.prefill.prefixes.record(PATH, body("a"), ids(0), cache)
    route = next(r for r in instance.routes() if r.pattern == "/v1/status")
    req = HttpRequest("GET", "/v1/status", b"", {"authorization": f"Bearer {key}"}, b"")

    async def run() -> dict[str, Any]:
        SHARE.set(share)
        return orjson.loads((await route.handler(req)).body)  # type: ignore[no-any-return]

    return contextvars.copy_context().run(asyncio.run, run())


def test_a_prefill_instance_reports_its_cache_to_its_peers_only() -> None:
    plane, a = _Plane(_Engine(PrefixCache(TOKENS, 16))), prompt_blocks(PATH, body("a"))
    peer = _status_doc(plane, Share("key#1", 1.0, 0), PEER_KEY)
    assert read_report(peer) == frozenset(a)
    other = _status_doc(plane, Share("key#2", 1.0, 0), "a-clients-key")
    assert read_report(other) is None
    assert other["prefill"]["handovers"] == 0  # the rest of the status as before
    no_keys = _status_doc(plane, DEFAULT, "")  # no key check: its port is kept private
    assert read_report(no_keys) == frozenset(a)
    mixed = _Plane(_Engine(PrefixCache(TOKENS, 16)), _Engine(None))  # a cache it cannot read
    assert read_report(_status_doc(mixed, Share("key#1", 1.0, 0), PEER_KEY)) is None


def test_what_is_kept_is_bounded_by_what_the_cache_can_hold() -> None:
    cache = PrefixCache(capacity=16, block=16)  # one block: a quarter of a prompt's tokens
    held = HeldPrefixes(max_kept=2 * 2)
    for n, letter in enumerate("xyz"):
        prefilled(cache, ids(n * TOKENS))
        held.record(PATH, body(letter), ids(n * TOKENS), cache)
    assert held.kept == 4  # per prompt: the text block a quarter covers and 1 digest
    assert len(held) == 2  # the oldest prompt went to stay within max_kept
    assert held.held() == prompt_blocks(PATH, body("z"))[:1]  # only z's block is cached
    assert (len(held), held.kept) == (1, 2)  # y's was evicted: y is forgotten
