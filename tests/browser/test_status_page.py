"""The status page in a real browser (headless Chromium through selenium) against a live server
under traffic: the numbers and states it shows are the server's own, read from /v2/models/stats
and /metrics once the traffic stopped; a model that failed to load shows why. The last test
saves a screenshot (UPDATE_SCREENSHOT=1: the one the docs show, docs/images/status_page.png)."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.conftest import EXAMPLES, ROOT
from tests.serverproc import ServerProcess, served, start_server, wait_for

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# the docs' picture is taken again only when asked (UPDATE_SCREENSHOT=1): a test run leaves the
# tracked file as it is
DOCS_SCREENSHOT = ROOT / "docs" / "images" / "status_page.png"
POLL_MS = 400  # the page's poll interval in these tests (?interval=)
WAIT_S = 60.0  # upper bound on any wait for the page
BROKEN_REASON = "the weights file is corrupt (checksum mismatch)"

# /metrics' samples: (name, labels) -> value
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

ADDER_PY = """
import numpy as np
from rosettaserve import Model


class Adder(Model):
    def predict(self, inputs):
        return {"y": inputs["x"] + np.float32(1)}
"""
BROKEN_PY = f'''
from rosettaserve import Model


class Broken(Model):
    def load(self):
        raise RuntimeError("{BROKEN_REASON}")

    def predict(self, inputs):
        return inputs
'''


def _model(repo: Path, name: str, source: str, yaml: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "model.py").write_text(source)
    (repo / name / "model.yaml").write_text(yaml)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("status_repo")
    _model(
        repo,
        "adder",
        ADDER_PY,
        "runtime: python\nclass: Adder\nmax_batch_size: 8\n"
        "dynamic_batching: {max_queue_delay_microseconds: 2000}\n"
        "inputs: [{name: x, datatype: FP32, shape: [-1, 2]}]\n"
        "outputs: [{name: y, datatype: FP32, shape: [-1, 2]}]\n",
    )
    _model(
        repo,
        "broken",
        BROKEN_PY,
        "runtime: python\nclass: Broken\ninputs: [{name: x, datatype: FP32, shape: [-1]}]\n"
        "outputs: [{name: x, datatype: FP32, shape: [-1]}]\n",
    )
    shutil.copytree(EXAMPLES / "tiny_llama", repo / "tiny_llama")
    proc = start_server(repo, wait_ready=False)  # never ready as a whole: `broken` fails
    deadline = time.monotonic() + WAIT_S
    while not any(" versions: " in line for line in proc.lines):
        assert time.monotonic() < deadline, "\n".join(proc.lines)
        time.sleep(0.1)
    yield from served(proc)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1500,1250",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium')}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def infer(client: httpx.Client, rows: int, good: bool = True) -> int:
    x = [[float(i), 1.0] for i in range(rows)] if good else [[1.0, 2.0, 3.0]]  # shape [1, 3]
    rows = rows if good else 1
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [rows, len(x[0])], "data": x}]}
    return client.post("/v2/models/adder/infer", json=body).status_code


def traffic(server: ServerProcess, requests: int) -> tuple[int, int, int]:
    """``requests`` inferences over 8 connections (a few of a shape the model refuses), then 3
    completions from the LLM; returns the adder's successes and refusals, and the tokens the
    LLM says it generated."""
    with httpx.Client(base_url=server.http_url, timeout=30) as client:
        with ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(lambda i: infer(client, 1 + i % 3, i % 50 != 7), range(requests)))
        tokens = 0
        for prompt in ("The cat", "A dog ran", "Once upon"):
            body = {"model": "tiny_llama", "prompt": prompt, "max_tokens": 8, "temperature": 0}
            reply = client.post("/v1/completions", json=body)
            assert reply.status_code == 200, reply.text
            tokens += reply.json()["usage"]["completion_tokens"]
    assert set(codes) == {200, 400}
    return codes.count(200), codes.count(400), tokens


def body_number(browser: WebDriver, name: str) -> float:
    """A number the page keeps on its body after each poll it drew (``data-polls``: how many;
    ``data-updated``: the server's clock when it made the last document)."""
    return float(browser.execute_script(f"return document.body.dataset.{name} || 0"))


def wait_polls(browser: WebDriver, more: int) -> None:
    """Until the page has polled ``more`` more times (a poll that began before now, too)."""
    target = body_number(browser, "polls") + more
    wait_for(lambda: body_number(browser, "polls") >= target, WAIT_S)


def wait_drawn_after(browser: WebDriver, moment: float) -> float:
    """Until the page has drawn a document the server made after ``moment`` (time.time(): the
    server runs on this host, on the same clock); returns when that document was made."""
    wait_for(lambda: body_number(browser, "updated") > moment, WAIT_S)
    return body_number(browser, "updated")


def text(browser: WebDriver, selector: str) -> str:
    """An element's text, found and read in one script: the page replaces its rows and facts at
    each poll, so an element found by one WebDriver command can be gone (stale) by the next."""
    script = "return document.querySelector(arguments[0]).innerText.trim()"
    return str(browser.execute_script(script, selector))


def shown(browser: WebDriver, row: str, field: str) -> str:
    return text(browser, f'{row} [data-field="{field}"]')


def number(text: str) -> float:
    return float(text.replace(",", "").split("/")[0])


def scrape(url: str) -> Samples:
    exposition = httpx.get(url + "/metrics").text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(exposition)
        for s in family.samples
    }


def counted(server: ServerProcess, sent: int) -> tuple[dict[str, Any], Samples]:
    """The adder's stats and /metrics once the server has counted all ``sent`` requests and
    nothing is left running: the LLM engine sets its running gauge at the end of the step that
    finished the last sequence, which can come after the client already has its answer."""
    read: list[tuple[dict[str, Any], Samples]] = []

    def still() -> bool:
        stats = httpx.get(server.http_url + "/v2/models/adder/stats").json()["model_stats"][0]
        samples = scrape(server.http_url)
        read.append((stats, samples))
        moving = ("rosettaserve_inflight_requests", "rosettaserve_queued_requests")
        return (
            metric_sum(samples, "rosettaserve_requests_total", model="adder") == sent
            and not any(metric_sum(samples, name, model="adder") for name in moving)
            and not metric_sum(samples, "vllm:num_requests_running")
        )

    wait_for(still, WAIT_S)
    return read[-1]


def metric_sum(samples: Samples, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def p99_from_metrics(samples: Samples) -> float:
    """The adder's p99 latency in ms from /metrics' cumulative buckets (histogram_quantile)."""
    name = "rosettaserve_request_duration_seconds_bucket"
    bounds: dict[float, float] = {}
    for (n, ls), v in samples.items():
        labels = dict(ls)
        if n == name and labels["model"] == "adder":
            le = float(labels["le"])
            bounds[le] = bounds.get(le, 0.0) + v
    ordered = sorted(bounds.items())
    rank = 0.99 * ordered[-1][1]
    lower, below = 0.0, 0.0
    for le, cumulative in ordered:
        if cumulative >= rank and cumulative > below:
            if le == float("inf"):
                return lower * 1e3
            return (lower + (le - lower) * (rank - below) / (cumulative - below)) * 1e3
        lower, below = le, cumulative
    raise AssertionError("no bucket holds the rank")


def test_page_shows_the_servers_numbers_and_states(
    server: ServerProcess, browser: WebDriver
) -> None:
    browser.get(f"{server.http_url}/?interval={POLL_MS}")
    wait_drawn_after(browser, 0.0)
    successes, refused, tokens = traffic(server, 300)
    # the traffic has stopped: once the server has counted it, nothing moves; read the server,
    # then wait for two documents made after that (the rates between them are 0)
    stats, samples = counted(server, successes + refused)
    first = wait_drawn_after(browser, time.time())
    wait_drawn_after(browser, first)

    adder = '#models tr[data-model="adder"]'
    assert shown(browser, adder, "state") == "READY"
    assert stats["inference_stats"]["success"]["count"] == successes
    assert number(shown(browser, adder, "success")) == successes
    failed = metric_sum(samples, "rosettaserve_requests_total", model="adder") - successes
    assert failed == refused == 6  # i % 50 == 7 for i < 300
    assert number(shown(browser, adder, "failed")) == failed
    assert number(shown(browser, adder, "executions")) == stats["execution_count"]
    assert stats["execution_count"] == metric_sum(samples, "rosettaserve_batch_size_count",
                                                  model="adder")  # fmt: skip
    rows = metric_sum(samples, "rosettaserve_batch_size_sum", model="adder")
    mean_batch = rows / stats["execution_count"]
    assert number(shown(browser, adder, "batch")) == pytest.approx(mean_batch, abs=0.006)
    assert number(shown(browser, adder, "p99")) == pytest.approx(p99_from_metrics(samples),
                                                                 rel=0.01, abs=0.001)  # fmt: skip
    assert number(shown(browser, adder, "inflight")) == 0
    assert number(shown(browser, adder, "queued")) == 0
    assert number(shown(browser, adder, "rps")) == 0  # nothing in the last interval

    llm = '#llm tr[data-llm="tiny_llama"]'
    assert number(shown(browser, llm, "tokens")) == tokens
    assert shown(browser, llm, "running") == "0 / 32"
    assert shown(browser, '#models tr[data-model="tiny_llama"]', "state") == "READY"

    assert text(browser, "#fact-http") == server.http_url
    assert text(browser, "#fact-grpc") == server.grpc_address


def test_a_model_that_failed_to_load_shows_its_reason(
    server: ServerProcess, browser: WebDriver
) -> None:
    browser.get(f"{server.http_url}/?interval={POLL_MS}")
    wait_drawn_after(browser, 0.0)
    ready = httpx.get(server.http_url + "/v2/models/broken/ready")
    assert ready.status_code != 200
    assert shown(browser, '#models tr[data-model="broken"]', "state") == "UNAVAILABLE"
    reason = text(browser, 'tr[data-reason-for="broken/1"]')
    assert BROKEN_REASON in reason


def test_screenshot_under_traffic(
    server: ServerProcess, browser: WebDriver, tmp_path: Path
) -> None:
    update = os.environ.get("UPDATE_SCREENSHOT") == "1"
    screenshot = DOCS_SCREENSHOT if update else tmp_path / "status_page.png"
    """The picture the docs show, taken while requests and generations run: a few seconds of
    traffic in the charts."""
    browser.get(f"{server.http_url}/?interval={POLL_MS}")
    wait_drawn_after(browser, 0.0)
    stop = threading.Event()
    with ThreadPoolExecutor(3) as pool:
        running = [pool.submit(steady_traffic, server, stop, llm) for llm in (False, False, True)]
        try:
            wait_polls(browser, 30)  # 12 s of traffic at the test's poll interval
            assert browser.find_elements(By.CSS_SELECTOR, "#chart-rps polyline")
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            assert browser.get_screenshot_as_file(str(screenshot))
        finally:
            stop.set()
        assert sum(f.result(timeout=WAIT_S) for f in running) > 0
    assert screenshot.stat().st_size > 10_000


def steady_traffic(server: ServerProcess, stop: threading.Event, llm: bool) -> int:
    """Requests one after the other until ``stop`` (a completion each, or an inference of a
    few rows, one in 50 refused); returns how many succeeded."""
    done = 0
    with httpx.Client(base_url=server.http_url, timeout=30) as client:
        for i in range(100_000):
            if stop.is_set():
                break
            if llm:
                body = {"model": "tiny_llama", "prompt": "Once upon", "max_tokens": 16}
                done += client.post("/v1/completions", json=body).status_code == 200
            else:
                done += infer(client, 1 + i % 4, i % 50 != 7) == 200
                time.sleep(0.004)  # a steady pace, not a burst
    return done
