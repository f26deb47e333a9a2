"""What one party may do to a PD request that is not its own, with real processes on loopback:
a scheduler, a prefill and a decode instance that require the instance key, and an attacker
who holds that key (the worst case: it should have been the instances' alone).

Each attack runs beside a normal client of the scheduler, whose answer must be exactly what it
is alone: a ``d-target`` or ``pNodeAddr`` that is no peer (refused with 403, and the listener
there gets no connection, so neither the prompt nor the peer key), request ids in
``/v1/status``, cancelling or re-posting another request's job on D, a second ``/dresult``
reader, the prefill instance's KV leases filled by a decode instance that never fetches, and a
duplicate ``req-id``."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest

from rosettaserve.pd import wire
from tests.integration.test_pd_faults import LongStream
from tests.pdfakes import Listener, StuckDecode, free_port
from tests.pdproc import eventually, llm_repo, start_instance, start_scheduler
from tests.serverproc import ServerProcess, stop_cleanly

KEY = "instance-key-33cc"  # the instances' key, and the one they send each other
AUTH = {"authorization": f"Bearer {KEY}"}
BUDGET = 40_000  # bytes of KV leases at P: a few short prompts' caches
NORMAL = {"model": "tiny_llama", "prompt": "Once upon a time there was a", "max_tokens": 12,
          "temperature": 0}  # fmt: skip
SECRET = "THE VICTIM'S SECRET PROMPT"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    repo = llm_repo(tmp_path_factory.mktemp("pd_trust"), max_model_len=400_000)
    keys = ("--api-key", KEY, "--peer-api-key", KEY)
    stuck, p_port = StuckDecode(), free_port()
    d = start_instance(repo, "decode", *keys, "--peer-allow", f"localhost:{p_port}")
    d_port = d.http_hostport.rsplit(":", 1)[1]
    peers = ("--peer-allow", f"127.0.0.1:{d_port}", f"127.0.0.1:{stuck.port}")
    budget = ("--kv-lease-budget", str(BUDGET))
    p = start_instance(repo, "prefill", *keys, *peers, *budget, "--http-port", str(p_port))
    s = start_scheduler([p], [d], "--peer-api-key", KEY)
    c = {"prefill": p, "decode": d, "scheduler": s, "stuck": stuck, "d_port": int(d_port)}
    c["alone"] = normal(c)  # the normal client's answer, before anything else ran
    yield c
    for proc in (s, p, d):
        stop_cleanly(proc)
    stuck.close()


def normal(cluster: dict[str, Any]) -> Any:
    url = cluster["scheduler"].http_url + "/v1/completions"
    r = httpx.post(url, json=NORMAL, timeout=60)
    assert r.status_code == 200, r.text
    doc = r.json()
    return doc["choices"], doc["usage"]


def beside(cluster: dict[str, Any], attack: Callable[[], None]) -> None:
    """``attack`` while the normal client's request runs; its answer is what it is alone."""
    answers: list[Any] = []
    client = threading.Thread(target=lambda: answers.append(normal(cluster)))
    client.start()
    attack()
    client.join(60)
    assert answers == [cluster["alone"]]


def to_prefill(cluster: dict[str, Any], d_target: str, req_id: str, **doc: Any) -> httpx.Response:
    headers = {**AUTH, **wire.prefill_headers(req_id, "127.0.0.1", 1, False)}
    headers[wire.D_TARGET] = d_target
    body = {"model": "tiny_llama", "prompt": SECRET, "max_tokens": 8, "ignore_eos": True} | doc
    url = cluster["prefill"].http_url + "/v1/completions"
    return httpx.post(url, json=body, headers=headers, timeout=60)


def handover(cluster: dict[str, Any], req_id: str, p_node: str, **change: Any) -> dict[str, Any]:
    """A hand-over body as a prefill instance writes it, with the attacker's text."""
    delta = {"text": "FORGED-BY-ATTACKER ", "ids": [5], "special": [False], "logprobs": None}
    doc = {"reqId": req_id, "jobKey": "attacker-made-this-key", "pNodeAddr": p_node,
           "path": "/v1/completions", "body": orjson.dumps(NORMAL).decode(),
           "promptIds": [1, 9, 20], "deltas": [delta], "seed": 0, "samplerState": None,
           "kvTokens": 3, "kvBytes": 0, "identity": None}  # fmt: skip
    return doc | change


def to_decode(cluster: dict[str, Any], doc: dict[str, Any]) -> httpx.Response:
    url = cluster["decode"].http_url + "/v1/pd/decode"
    return httpx.post(url, content=orjson.dumps(doc), headers=AUTH, timeout=60)


def no_contact(listener: Listener) -> None:
    received = listener.received()
    assert received == [], received  # no connection: neither the key nor the prompt went there
    assert not any(KEY.encode() in data or SECRET.encode() in data for data in received)


# -- contact only known peers ---------------------------------------------------------------------


@pytest.mark.parametrize("where", ["another port", "another loopback address"])
def test_a_d_target_that_is_no_peer_is_refused_before_any_connection(
    cluster: dict[str, Any], where: str
) -> None:
    port = 0 if where == "another port" else cluster["d_port"]
    host = "127.0.0.1" if where == "another port" else "127.0.0.2"
    listener = Listener(host, port)
    replies: list[httpx.Response] = []
    try:
        beside(
            cluster, lambda: replies.append(to_prefill(cluster, f"{host};{listener.port}", "a1"))
        )
        no_contact(listener)
    finally:
        listener.close()
    (r,) = replies
    assert r.status_code == 403
    assert r.headers["x-pd-failed"] == "decode"  # a scheduler would try another decode instance
    error = r.json()["error"]  # in the family's own error shape (OpenAI's)
    assert set(error) == {"message", "type", "param", "code"}
    assert f"decode instance {host}:{listener.port} is not a known peer" in error["message"]
    assert status(cluster["prefill"], KEY)["prefill"]["leases"] == 0  # nothing was done


@pytest.mark.parametrize("where", ["another port", "another loopback address"])
def test_a_p_node_that_is_no_peer_is_refused_before_any_connection(
    cluster: dict[str, Any], where: str
) -> None:
    p_port = int(cluster["prefill"].http_hostport.rsplit(":", 1)[1])
    host = "127.0.0.1" if where == "another port" else "127.0.0.2"
    listener = Listener(host, 0 if where == "another port" else p_port)
    replies: list[httpx.Response] = []
    before = status(cluster["decode"], KEY)["decode"]["accepted"]
    try:
        doc = handover(cluster, "b1", f"{host};{listener.port}", kvBytes=4096)
        beside(cluster, lambda: replies.append(to_decode(cluster, doc)))
        no_contact(listener)
    finally:
        listener.close()
    (r,) = replies
    assert r.status_code == 403
    assert r.json()["isValidDecodeParameters"] is False  # D's own refusal shape
    assert f"prefill instance {host}:{listener.port} is not a known peer" in r.text
    accepted = status(cluster["decode"], KEY)["decode"]["accepted"]
    assert accepted == before + 1  # the normal client's request alone


def test_a_p_node_named_by_a_name_no_peer_has_is_refused(cluster: dict[str, Any]) -> None:
    """This machine's host name may resolve to the prefill instance's address, but it is not
    the name D was given (localhost): a name a request chose is never looked up."""
    p_node = f"{socket.gethostname()};{cluster['prefill'].http_hostport.rsplit(':', 1)[1]}"
    r = to_decode(cluster, handover(cluster, "b2", p_node))
    assert r.status_code == 403
    assert "is not a known peer" in r.json()["errorMessage"]
    named = handover(cluster, "b3", p_node.replace(socket.gethostname(), "LocalHost."))
    assert to_decode(cluster, named).status_code == 200  # D's own peer, however it is spelt


# -- nobody but the parties touches a request -----------------------------------------------------


@pytest.fixture
def victim(cluster: dict[str, Any]) -> Iterator[LongStream]:
    """A long stream through the scheduler, decoding on D while the test runs."""
    doc = {"model": "tiny_llama", "prompt": SECRET, "max_tokens": 300_000, "stream": True}
    stream = LongStream(cluster, "/v1/completions", doc | {"ignore_eos": True, "temperature": 0})
    yield stream
    stream.leave()
    eventually(lambda: status(cluster["decode"], KEY)["decode"]["jobs"] == 0)


def test_status_counts_the_requests_and_names_none(
    cluster: dict[str, Any], victim: LongStream
) -> None:
    def look() -> None:
        for role in ("prefill", "decode"):
            text = httpx.get(cluster[role].http_url + "/v1/status", headers=AUTH).text
            assert victim.req_id not in text
        # the victim's job, and the normal client's when it has reached D by now
        assert status(cluster["decode"], KEY)["decode"]["jobs"] in (1, 2)

    beside(cluster, look)


def test_another_party_cannot_cancel_or_forge_a_request(
    cluster: dict[str, Any], victim: LongStream
) -> None:
    url = f"{cluster['decode'].http_url}/v1/pd/decode/{victim.req_id}"
    p_node = cluster["prefill"].http_hostport.replace(":", ";")
    replies: list[httpx.Response] = []

    def attack() -> None:
        for key in ({}, {wire.JOB_KEY: "attacker-made-this-key"}):
            replies.append(httpx.delete(url, headers=AUTH | key, timeout=10))
        replies.append(to_decode(cluster, handover(cluster, victim.req_id, p_node)))

    beside(cluster, attack)
    assert [r.status_code for r in replies] == [403, 403, 409]
    assert "no request" in replies[0].json()["error"]
    # still decoding (the normal client's job may take a moment to leave D's count)
    eventually(lambda: status(cluster["decode"], KEY)["decode"]["jobs"] == 1)
    before = len(victim.body)
    eventually(lambda: len(victim.body) > before)  # and still streaming
    assert b"FORGED" not in victim.body


def test_a_forged_hand_over_of_a_finished_request_decodes_nothing(cluster: dict[str, Any]) -> None:
    """P did not hand it over with that key: D drops it before it decodes, sending nothing."""
    done = httpx.post(cluster["scheduler"].http_url + "/v1/completions", json=NORMAL, timeout=60)
    req_id = done.headers["x-pd-req-id"]
    p_node = cluster["prefill"].http_hostport.replace(":", ";")
    before = status(cluster["decode"], KEY)["decode"]
    replies: list[httpx.Response] = []
    beside(cluster, lambda: replies.append(to_decode(cluster, handover(cluster, req_id, p_node))))
    assert replies[0].status_code == 200  # taken at the door (as a hand-over is), then dropped
    eventually(
        lambda: status(cluster["decode"], KEY)["decode"]["unconfirmed"] > before["unconfirmed"]
    )
    after = status(cluster["decode"], KEY)["decode"]
    assert (after["finished"], after["failed"]) == (before["finished"] + 1, before["failed"])


def test_a_second_dresult_reader_is_refused_and_gets_no_token(
    cluster: dict[str, Any], victim: LongStream
) -> None:
    replies: list[httpx.Response] = []
    before = status(cluster["decode"], KEY)["decode"]["dresultConnections"]
    beside(cluster, lambda: replies.append(
        httpx.get(cluster["decode"].http_url + "/dresult", headers=AUTH, timeout=10)))  # fmt: skip
    (r,) = replies
    assert r.status_code == 409
    assert set(r.json()) == {"error"}  # an error, no frame
    eventually(lambda: status(cluster["decode"], KEY)["decode"]["jobs"] == 1)
    decode = status(cluster["decode"], KEY)["decode"]
    assert (decode["dresultConnections"], decode["jobs"]) == (before, 1)
    assert victim.thread.is_alive()  # the victim's stream goes on, unbroken
    size = len(victim.body)
    eventually(lambda: len(victim.body) > size)
    assert victim.error is None


# -- the prefill instance's KV leases --------------------------------------------------------------


def test_leases_held_by_a_stuck_decode_instance_fill_the_budget_then_free(
    cluster: dict[str, Any],
) -> None:
    stuck, p = cluster["stuck"], cluster["prefill"]
    target = f"127.0.0.1;{stuck.port}"
    refused: httpx.Response | None = None
    for n in range(100):  # caches of a prompt shorter than NORMAL's until the budget is full
        r = to_prefill(cluster, target, f"c{n}", prompt="Once upon")
        if r.status_code != 200:
            refused = r
            break
    assert refused is not None
    assert refused.status_code == 503, refused.text
    assert "--kv-lease-budget" in refused.json()["error"]["message"]  # OpenAI's error shape
    held = status(p, KEY)["prefill"]
    assert 0 < held["leaseBytes"] <= BUDGET
    assert held["leases"] == len(stuck.handovers) > 1
    # the normal client's request (a longer prompt) does not fit either: 503, in its shape
    r = httpx.post(cluster["scheduler"].http_url + "/v1/completions", json=NORMAL, timeout=60)
    assert r.status_code == 503
    assert "--kv-lease-budget" in r.json()["error"]["message"]
    # a fetch frees a lease; only with its job key
    first, headers = stuck.handovers[0]
    assert headers["authorization"] == f"Bearer {KEY}"  # (a known peer: it gets the key)
    kv = f"{p.http_url}/v1/pd/kv/{first['reqId']}"
    wrong = httpx.get(kv, headers=AUTH | {wire.JOB_KEY: "attacker-made-this-key"}, timeout=10)
    assert wrong.status_code == 403
    for body, _ in stuck.handovers:
        key = {wire.JOB_KEY: body["jobKey"]}
        got = httpx.get(f"{p.http_url}/v1/pd/kv/{body['reqId']}", headers=AUTH | key, timeout=10)
        assert got.status_code == 200
        assert got.content.startswith(b"RSKV")
        assert len(got.content) == body["kvBytes"]
    assert status(p, KEY)["prefill"]["leaseBytes"] == 0
    stuck.handovers.clear()
    assert normal(cluster) == cluster["alone"]  # once they are freed, the same answer


def test_a_duplicate_req_id_is_refused_and_the_held_lease_stays(cluster: dict[str, Any]) -> None:
    stuck, p = cluster["stuck"], cluster["prefill"]
    r = to_prefill(cluster, f"127.0.0.1;{stuck.port}", "d1", prompt="Hi")
    assert r.status_code == 200, r.text
    (held, _), replies = stuck.handovers[-1], []
    beside(cluster, lambda: replies.append(
        to_prefill(cluster, f"127.0.0.1;{cluster['d_port']}", "d1", prompt="Other")))  # fmt: skip
    (dup,) = replies
    assert dup.status_code == 409
    assert "duplicate req-id" in dup.json()["error"]["message"]
    key = {wire.JOB_KEY: held["jobKey"]}
    got = httpx.get(f"{p.http_url}/v1/pd/kv/d1", headers=AUTH | key, timeout=10)
    assert got.status_code == 200  # the first party's lease, whole
    assert len(got.content) == held["kvBytes"]
    assert b'"req_id":"d1"' in got.content[:400]
    stuck.handovers.clear()


def status(instance: ServerProcess, key: str) -> dict[str, Any]:
    """An instance's /v1/status (its key is required here)."""
    reply = httpx.get(instance.http_url + "/v1/status", headers={"x-api-key": key}, timeout=10)
    assert reply.status_code == 200, reply.text
    return dict(reply.json())
