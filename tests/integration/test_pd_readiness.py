"""A decode instance restarted while clients keep sending requests, its models slow to load (a
python model that loads only once a "hold" file is gone, listed before the LLM): its /dresult
is back long before it can decode, and no client sees a 500 meanwhile. While no decode
instance can serve, requests are refused with 503 and Retry-After in their family's form and
the scheduler's readiness probe says 503; once the instance's models are READY, it serves
again the same answers as before."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.pdproc import (
    LOOPBACK_PEERS,
    eventually,
    instances,
    llm_repo,
    start_instance,
    start_scheduler,
)
from tests.serverproc import ServerProcess, launch, stop_cleanly

SLOW_LOAD = '''
import time
from pathlib import Path

from rosettaserve import Model


class SlowLoad(Model):
    """Loads only once its hold file is gone; y = x."""

    def load(self):
        hold = Path(self.config["parameters"]["hold"])
        while hold.exists():
            time.sleep(0.02)

    def predict(self, inputs):
        return {"y": inputs["x"]}
'''
REQUESTS: list[tuple[str, dict[str, Any]]] = [
    (
        "/v1/completions",
        {"model": "tiny_llama", "prompt": "The quick brown", "max_tokens": 8, "temperature": 0},
    ),
    ("/generate", {"inputs": "Once upon a time", "parameters": {"max_new_tokens": 8}}),
    ("/infer", {"inputs": "The quick brown", "parameters": {"max_new_tokens": 8}}),
]


def slow_repo(dest: Path) -> tuple[Path, Path]:
    """tiny_llama behind a model that loads first and waits while ``hold`` exists."""
    repo = llm_repo(dest / "repo")
    hold = dest / "hold"
    (repo / "a_slow").mkdir()
    (repo / "a_slow" / "model.py").write_text(SLOW_LOAD)
    (repo / "a_slow" / "model.yaml").write_text(
        "runtime: python\nclass: SlowLoad\n"
        "inputs: [{name: x, datatype: FP32, shape: [-1]}]\n"
        "outputs: [{name: y, datatype: FP32, shape: [-1]}]\n"
        f"parameters: {{hold: '{hold}'}}\n"
    )
    return repo, hold


class Client:
    """Sends the REQUESTS in turn until stopped (at most ``limit``), keeping every answer;
    after a 503 it pauses briefly."""

    def __init__(self, url: str, limit: int = 5000) -> None:
        self.url, self.limit = url, limit
        self.answers: list[tuple[int, str, dict[str, str]]] = []  # (status, text, headers)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            for i in range(self.limit):
                if self.stopping.is_set():
                    return
                path, doc = REQUESTS[i % len(REQUESTS)]
                r = client.post(path, json=doc)
                self.answers.append((r.status_code, r.text, dict(r.headers)))
                if r.status_code == 503:  # (sooner than its Retry-After: a test's pace)
                    self.stopping.wait(0.05)

    def sent(self) -> int:
        return len(self.answers)

    def stop(self) -> list[tuple[int, str, dict[str, str]]]:
        self.stopping.set()
        self.thread.join(120)
        assert not self.thread.is_alive()
        return self.answers


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, Any]]:
    repo, hold = slow_repo(tmp_path)
    c: dict[str, Any] = {"repo": repo, "hold": hold}
    c["prefill"] = start_instance(llm_repo(tmp_path / "p"), "prefill")
    c["decode"] = start_instance(repo, "decode")
    c["scheduler"] = start_scheduler([c["prefill"]], [c["decode"]])
    yield c
    hold.unlink(missing_ok=True)
    for proc in (c["scheduler"], c["prefill"], c["decode"]):
        stop_cleanly(proc)


def relaunch(repo: Path, port: str) -> ServerProcess:
    """A decode instance on ``port`` again; returns once it printed its address (loaded)."""
    cmd = [sys.executable, "-m", "rosettaserve", "serve", str(repo), "--role", "decode"]
    args = [*cmd, "--http-port", port, "--grpc-port", "0", *LOOPBACK_PEERS]
    proc, lines, addresses = launch(args, ("http",))
    return ServerProcess(proc, addresses["http"], lines)


def decode_view(scheduler: ServerProcess) -> dict[str, Any]:
    (view,) = instances(scheduler)["decode"]
    return dict(view)


def ready(scheduler: ServerProcess) -> int:
    return httpx.get(scheduler.http_url + "/v2/health/ready", timeout=10).status_code


def test_a_decode_restart_with_a_slow_load_never_gives_a_500(cluster: dict[str, Any]) -> None:
    scheduler = cluster["scheduler"]
    with httpx.Client(base_url=scheduler.http_url, timeout=60) as http:
        expected = {path: http.post(path, json=doc).json() for path, doc in REQUESTS}
    client = Client(scheduler.http_url)
    eventually(lambda: client.sent() >= 3)
    assert cluster["decode"].stop() == 0
    cluster["hold"].touch()  # the restarted instance's models wait
    port = cluster["decode"].http_hostport.rsplit(":", 1)[1]
    with ThreadPoolExecutor(1) as pool:
        restarting: Future[ServerProcess] = pool.submit(relaunch, cluster["repo"], port)
        eventually(lambda: decode_view(scheduler)["dresult_connections"] == 2, timeout=120)
        loading_from = client.sent()  # requests from here on meet a decode instance loading
        eventually(lambda: client.sent() >= loading_from + 6, timeout=120)
        assert {status for status, _, _ in client.answers} <= {200, 503}
        assert not decode_view(scheduler)["healthy"]
        assert ready(scheduler) == 503
        cluster["hold"].unlink()
        cluster["decode"] = restarting.result(timeout=120)
    eventually(lambda: ready(scheduler) == 200, timeout=60)
    served_from = client.sent()
    eventually(lambda: client.sent() >= served_from + 6, timeout=120)
    answers = client.stop()
    statuses = Counter(status for status, _, _ in answers)
    assert set(statuses) <= {200, 503}, [a for a in answers if a[0] not in (200, 503)][:3]
    refused = [(text, headers) for status, text, headers in answers if status == 503]
    without = [(text, headers) for text, headers in refused if headers.get("retry-after") != "1"]
    assert not without, without[:3]
    assert any("not ready" in text for text, _ in refused)  # the loading time was met
    for status, text, _ in answers[served_from + 1 :]:  # sent once it was ready again
        assert status == 200, text
    with httpx.Client(base_url=scheduler.http_url, timeout=60) as http:
        again = {path: http.post(path, json=doc).json() for path, doc in REQUESTS}
    for path in ("/generate", "/infer"):  # the same answers as before the restart
        assert again[path] == expected[path]
    completion = again["/v1/completions"]["choices"][0]["text"]
    assert completion == expected["/v1/completions"]["choices"][0]["text"]
