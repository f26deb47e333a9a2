"""Fair share between API keys through prefill/decode, with real processes on loopback: a key that
floods the scheduler does not hold another key's request behind its queue at the prefill
instance, and weights count there; without keys at the scheduler, P serves in arrival order.

P's engine runs one sequence at a time (``max_num_seqs: 1``), held by a request of its own (sent
to P directly, served whole there: MindIE's flex shortcut) while the scheduler's requests queue
behind it one by one (each seen waiting in P's ``/v1/status`` before the next is sent); then the
hold is let go. Each request asks for one token, so it ends at P as soon as P's engine admitted
and prefilled it: P's access log (one line per answer, in the order P answered) is the order its
engine admitted them in. Orders, never times."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from rosettaserve.pd import wire
from tests.pdproc import eventually, llm_repo, start_instance, start_scheduler
from tests.serverproc import ServerProcess, stop_cleanly

PEER = "instance-key-5e1f"  # the instances' key, which the scheduler and they send each other
KEY_A, KEY_B = "flooding-key-a1", "quiet-key-b2"
ROUTE = "/v1/completions"


@pytest.fixture(scope="module")
def instances(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("pd_fair")
    # one sequence at a time; no prefix cache: every prompt is prefilled in full
    repo = llm_repo(tmp, max_num_seqs=1, max_model_len=400_000, prefix_cache_tokens=0)
    keys = ("--api-key", PEER, "--peer-api-key", PEER)
    d = start_instance(repo, "decode", *keys)
    p = start_instance(repo, "prefill", *keys)
    (tmp / "keys.txt").write_text(f"{KEY_A}\n{KEY_B} weight=2\n")
    yield {"prefill": p, "decode": d, "keys": tmp / "keys.txt"}
    for proc in (p, d):
        stop_cleanly(proc)


def resource(p: ServerProcess) -> dict[str, Any]:
    """P's engine's counts (``/v1/status``, with the instances' key)."""
    doc = httpx.get(p.http_url + "/v1/status", headers={"x-api-key": PEER}, timeout=10).json()
    return dict(doc["resource"])


class Hold:
    """A request of P's own that runs until it is let go: P's one sequence is busy meanwhile."""

    def __init__(self, p: ServerProcess) -> None:
        host, port = p.http_hostport.rsplit(":", 1)
        headers = wire.prefill_headers("1", host, int(port), False)  # d-target: P itself
        headers["authorization"] = f"Bearer {PEER}"
        body = {"model": "tiny_llama", "prompt": "Hold", "max_tokens": 390_000,
                "ignore_eos": True, "stream": True}  # fmt: skip
        self.client = httpx.Client(base_url=p.http_url, timeout=60)
        request = self.client.build_request("POST", ROUTE, json=body, headers=headers)
        self.response = self.client.send(request, stream=True)
        assert self.response.status_code == 200, self.response.read()
        self.chunks = self.response.iter_raw()  # (kept: a generator let go closes the stream)
        next(self.chunks)  # its first token: it runs
        eventually(lambda: resource(p)["runningRequestNum"] == 1)

    def let_go(self) -> None:
        self.response.close()
        self.client.close()


def answered(lines: list[str], names: set[str]) -> list[str]:
    """The requests among ``names`` (their request ids) in the order an access log has them."""
    ids = [line.rsplit(" ", 1)[-1] for line in lines if f" POST {ROUTE} 200 " in line]
    return [i for i in ids if i in names]


Send = tuple[str, dict[str, str]]  # a request's name (its request id) and its header fields


def run_order(c: dict[str, Any], scheduler: ServerProcess, sends: list[Send]) -> list[str]:
    """Hold P, send each request through the scheduler one after the other (each waiting at P
    before the next goes), let go: their names in the order P's engine admitted them."""
    p = c["prefill"]
    before = len(p.lines)
    hold = Hold(p)
    threads, replies = [], {}
    for n, (name, fields) in enumerate(sends, 1):
        body = {"model": "tiny_llama", "prompt": f"{name}: Once upon a time", "max_tokens": 1,
                "temperature": 0}  # fmt: skip
        headers = {"x-request-id": name} | fields

        def send(name: str = name, body: Any = body, headers: Any = headers) -> None:
            url = scheduler.http_url + ROUTE
            replies[name] = httpx.post(url, json=body, headers=headers, timeout=120)

        threads.append(threading.Thread(target=send))
        threads[-1].start()
        eventually(lambda n=n: resource(p)["waitingRequestNum"] == n)  # type: ignore[misc]
    hold.let_go()
    for thread in threads:
        thread.join(120)
    for name, reply in replies.items():
        assert reply.status_code == 200, (name, reply.text)
    names = {name for name, _ in sends}
    eventually(lambda: len(answered(p.lines[before:], names)) == len(sends))
    return answered(p.lines[before:], names)


def scheduler_with(c: dict[str, Any], *args: str) -> Iterator[ServerProcess]:
    s = start_scheduler([c["prefill"]], [c["decode"]], "--peer-api-key", PEER, *args)
    yield s
    stop_cleanly(s)  # (D serves one /dresult reader: the next test's scheduler reads it)


@pytest.fixture
def keyed(instances: dict[str, Any]) -> Iterator[ServerProcess]:
    yield from scheduler_with(instances, "--api-key-file", str(instances["keys"]))


@pytest.fixture
def open_scheduler(instances: dict[str, Any]) -> Iterator[ServerProcess]:
    yield from scheduler_with(instances)


A = {"authorization": f"Bearer {KEY_A}"}
B = {"authorization": f"Bearer {KEY_B}"}
FORGED = {"pd-tenant": "key#2;weight=1000000"}  # a client naming itself B, a thousand times over


def test_a_flooding_key_does_not_hold_another_behind_it_at_p(
    instances: dict[str, Any], keyed: ServerProcess
) -> None:
    flood: list[Send] = [(f"a{n}", A | FORGED) for n in range(1, 5)]
    order = run_order(instances, keyed, [*flood, ("b1", B), ("b2", B)])
    # first come first served would be a1..a4, b1, b2: B (weight 2) gets two turns to A's one
    # from when it arrives, and A's own pd-tenant headers were not the scheduler's word
    assert order == ["a1", "b1", "b2", "a2", "a3", "a4"]


def test_without_keys_p_serves_in_arrival_order(
    instances: dict[str, Any], open_scheduler: ServerProcess
) -> None:
    names = ["a1", "a2", "a3", "a4", "b1", "b2"]
    assert run_order(instances, open_scheduler, [(name, {}) for name in names]) == names
