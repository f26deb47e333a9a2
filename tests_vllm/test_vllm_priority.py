"""Priority on ``runtime: vllm``: vLLM's queue is ordered by the request's priority (the body's
``priority``, the ``X-Priority`` header), not by arrival, and a non-zero priority is served
(vLLM's own default, "fcfs", would ignore it; the runtime sets "priority").

With ``max_num_seqs: 1`` vLLM runs one request at a time, so the order in which the queued
requests end is the order vLLM admitted them. Streams of the highest priority hold the one place
while the test's requests are queued (each counted by the engine before the next is sent); then
the test closes them (vLLM aborts them) and the queue is served.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from tests import serverproc
from tests.serverproc import ServerProcess, served, start_server
from tests_vllm.conftest import KV_CACHE_BYTES, MODEL, START_TIMEOUT_S, model_folder
from tests_vllm.test_vllm_runtime import engine_figure

ONE_AT_A_TIME = f"""\
runtime: vllm
parameters:
  max_num_seqs: 1
  max_waiting: 16
  kv_cache_memory_bytes: {KV_CACHE_BYTES}
"""
HOLDERS = 8  # about 500 decode steps each


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    repo = tmp_path_factory.mktemp("vllm_priority_repo")
    model_folder(repo, MODEL, ONE_AT_A_TIME)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(serverproc, "START_TIMEOUT_S", START_TIMEOUT_S)
        server: ServerProcess = start_server(repo)
    for started in served(server):
        with httpx.Client(base_url=started.http_url, timeout=120) as client:
            yield client


def completion(**fields: object) -> bytes:
    doc = {"model": MODEL, "prompt": "Once", "max_tokens": 16, "ignore_eos": True, **fields}
    return orjson.dumps(doc)


def hold(http: httpx.Client) -> socket.socket:
    """A stream of the highest priority, never read (closed: the client left, vLLM aborts it)."""
    url = urlsplit(str(http.base_url))
    body = completion(max_tokens=500, stream=True, priority=-1000)
    sock = socket.create_connection((url.hostname, url.port))
    head = f"POST /v1/completions HTTP/1.1\r\nhost: {url.netloc}\r\n"
    head += f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    sock.sendall(head.encode() + body)
    return sock


def wait_submitted(http: httpx.Client, count: int) -> None:
    """Until the engine has handed ``count`` requests to vLLM (a bound only against a hang)."""
    for _ in range(1200):
        if engine_figure(http, "prefills") >= count:
            return
        time.sleep(0.025)
    raise AssertionError(f"the engine never submitted {count} requests")


def test_a_higher_priority_is_served_first_whatever_its_arrival(http: httpx.Client) -> None:
    ended: list[str] = []
    answers: dict[str, int] = {}
    threads: list[threading.Thread] = []

    def send(name: str, body: bytes, headers: dict[str, str]) -> None:
        r = http.post("/v1/completions", content=body, headers=headers)
        answers[name] = r.status_code
        ended.append(name)

    submitted = engine_figure(http, "prefills")
    with ExitStack() as holding:
        for _ in range(HOLDERS):  # the highest priority: they hold vLLM's one place
            holding.enter_context(hold(http))
        submitted += HOLDERS
        wait_submitted(http, submitted)
        # sent lowest first: first come first served would answer in this order
        for name, body, headers in [
            ("lower", completion(priority=6), {}),
            ("low", completion(priority=5), {"x-priority": "-7"}),  # the body's wins
            ("default", completion(), {}),
            ("high", completion(), {"x-priority": "-1"}),
        ]:
            thread = threading.Thread(target=send, args=(name, body, headers))
            thread.start()
            threads.append(thread)
            submitted += 1
            wait_submitted(http, submitted)
    for thread in threads:  # the holders closed: vLLM aborts them and serves the queue
        thread.join()
    assert ended == ["high", "default", "low", "lower"]
    assert answers == dict.fromkeys(ended, 200)
