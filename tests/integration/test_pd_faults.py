"""Faults with real processes: a decode instance killed mid-request (its requests end with an
error in their family's form, not a hang; the scheduler routes around it and takes it back
once it answers again), a dead prefill instance (the next one serves), a client that leaves
(the decode instance drops the work), and a scheduler restart (rebuilt from the instances)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.pdproc import eventually, instances, llm_repo, start_instance, start_scheduler, status

ENDLESS = 300_000  # more tokens than any test waits for: only a fault or a cancel ends it


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    repo = llm_repo(tmp_path_factory.mktemp("pd_faults"), max_model_len=400_000)
    c: dict[str, Any] = {
        "repo": repo,
        "prefill": [start_instance(repo, "prefill") for _ in range(2)],
        "decode": [start_instance(repo, "decode") for _ in range(2)],
    }
    c["scheduler"] = start_scheduler(c["prefill"], c["decode"], "--token-timeout", "30")
    yield c
    for proc in [c["scheduler"], *c["prefill"], *c["decode"]]:
        proc.stop()


def scheduler_url(cluster: dict[str, Any]) -> str:
    return str(cluster["scheduler"].http_url)


def healthy(cluster: dict[str, Any], role: str, url: str) -> bool:
    return any(i["url"] == url and i["healthy"] for i in instances(cluster["scheduler"])[role])


def works(cluster: dict[str, Any], n: int = 4) -> list[str]:
    """n short requests through the scheduler, all answered; the req-ids they had."""
    ids = []
    with httpx.Client(base_url=scheduler_url(cluster), timeout=60) as client:
        for i in range(n):
            doc = {"inputs": "The quick brown", "parameters": {"max_new_tokens": 6 + i}}
            r = client.post("/generate", json=doc)
            assert r.status_code == 200, r.text
            assert r.json()["generated_text"].startswith(" fox")
            ids.append(r.headers["x-pd-req-id"])
    return ids


class LongStream:
    """A streaming request that runs until something ends it; read in a thread."""

    def __init__(self, cluster: dict[str, Any], path: str, doc: dict[str, Any]) -> None:
        self.client = httpx.Client(base_url=scheduler_url(cluster), timeout=60)
        self.response = self.client.send(
            self.client.build_request("POST", path, json=doc), stream=True
        )
        assert self.response.status_code == 200
        self.req_id = self.response.headers["x-pd-req-id"]
        self.body = b""
        self.started = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        assert self.started.wait(60), "no token arrived"

    def _read(self) -> None:
        try:
            for chunk in self.response.iter_raw():
                self.body += chunk
                if self.body.count(b"\n") >= 6:  # a few tokens in (SSE or vLLM's lines)
                    self.started.set()
        except httpx.HTTPError as exc:
            self.error = exc
        self.started.set()

    def finished(self, timeout: float = 60) -> bytes:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the stream hung"
        return self.body

    def leave(self) -> None:
        self.response.close()
        self.client.close()


def jobs(cluster: dict[str, Any]) -> list[int]:
    """The requests each decode instance is decoding (it counts them; it names none)."""
    return [status(d)["decode"]["jobs"] for d in cluster["decode"]]


def started(cluster: dict[str, Any], path: str, doc: dict[str, Any]) -> tuple[LongStream, Any]:
    """A long stream, and the decode instance it went to: the one with a job more."""
    before = jobs(cluster)
    stream = LongStream(cluster, path, doc)
    after = jobs(cluster)
    (index,) = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if b == a + 1]
    return stream, cluster["decode"][index]


def test_a_decode_instance_killed_mid_request(cluster: dict[str, Any]) -> None:
    chat = {"model": "tiny_llama", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    chat |= {"max_tokens": ENDLESS, "temperature": 0, "ignore_eos": True}
    vllm = {"prompt": "Once upon", "stream": True, "max_tokens": ENDLESS, "ignore_eos": True}
    placed = [started(cluster, "/v1/chat/completions", chat)]
    placed += [started(cluster, "/generate", vllm) for _ in range(2)]
    streams = [s for s, _ in placed]
    victim = placed[0][1]
    on_victim = [s for s, d in placed if d is victim]
    survivors = [s for s in streams if s not in on_victim]
    victim.proc.kill()
    for s in on_victim:  # an error in the family's own form, then the end: no hang
        body = s.finished()
        events = [e for e in body.split(b"\n\n") if e]
        if s is streams[0]:
            assert events[-1] == b"data: [DONE]"
            error = orjson.loads(events[-2].removeprefix(b"data: "))["error"]
            assert "went away" in error["message"]
            assert error["type"] == "server_error"
        else:  # vLLM's own framing: one JSON document per line
            *tokens, error = [orjson.loads(line) for line in body.splitlines()]
            assert all(set(t) == {"text"} for t in tokens)
            assert set(error) == {"error"}
            assert "went away" in error["error"]
    eventually(lambda: not healthy(cluster, "decode", victim.http_url))
    assert all(s.thread.is_alive() for s in survivors)  # the other instance goes on
    for s in survivors:
        s.leave()
    works(cluster)  # new requests go to the live instance
    # the same instance comes back on the same port and is taken back
    port = victim.http_hostport.rsplit(":", 1)[1]
    revived = start_instance(cluster["repo"], "decode", "--http-port", port)
    cluster["decode"] = [revived if d is victim else d for d in cluster["decode"]]
    eventually(lambda: healthy(cluster, "decode", revived.http_url))
    works(cluster, 6)
    assert status(revived)["decode"]["finished"] > 0  # new requests reach it again


def test_a_client_that_leaves_frees_the_decode_instance(cluster: dict[str, Any]) -> None:
    doc = {"model": "tiny_llama", "prompt": "Once upon", "stream": True, "max_tokens": ENDLESS}
    stream, d = started(cluster, "/v1/completions", doc | {"ignore_eos": True})
    before = status(d)["decode"]["cancelled"]
    stream.leave()
    eventually(lambda: status(d)["decode"]["cancelled"] == before + 1)
    eventually(lambda: status(d)["decode"]["jobs"] == 0)
    eventually(lambda: status(d)["resource"]["runningRequestNum"] == 0)


def test_a_dead_prefill_instance_is_skipped(cluster: dict[str, Any]) -> None:
    dead = cluster["prefill"][0]
    dead.proc.kill()
    dead.proc.wait()
    works(cluster, 6)  # each one finds the live instance, the first try included
    assert not healthy(cluster, "prefill", dead.http_url)
    port = dead.http_hostport.rsplit(":", 1)[1]
    cluster["prefill"][0] = start_instance(cluster["repo"], "prefill", "--http-port", port)
    eventually(lambda: healthy(cluster, "prefill", dead.http_url))
    works(cluster, 4)
    assert status(cluster["prefill"][0])["prefill"]["handovers"] > 0


def test_a_scheduler_restart_rebuilds_from_the_instances(cluster: dict[str, Any]) -> None:
    connections = [status(d)["decode"]["dresultConnections"] for d in cluster["decode"]]
    assert cluster["scheduler"].stop() == 0
    cluster["scheduler"] = start_scheduler(cluster["prefill"], cluster["decode"])
    eventually(
        lambda: all(
            i["healthy"] for r in ("prefill", "decode") for i in instances(cluster["scheduler"])[r]
        )
    )
    again = [status(d)["decode"]["dresultConnections"] for d in cluster["decode"]]
    assert again == [n + 1 for n in connections]
    ids = works(cluster, 4)
    assert len(set(ids)) == 4
