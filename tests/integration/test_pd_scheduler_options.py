"""The PD scheduler takes ``serve``'s HTTP limits and log format (one declaration of each in
``cli``): a real scheduler process with small limits answers 414, 431 and 408 as ``serve``
does, and writes its log lines as JSON. Its instances are not running: the limits apply before
any request is forwarded."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest

from tests.pdproc import eventually
from tests.rfc.h1client import Client, get
from tests.serverproc import ServerProcess, launch, served

MAX_LINE, MAX_HEADER = 256, 1024


@pytest.fixture(scope="module")
def scheduler() -> Iterator[ServerProcess]:
    cmd = [sys.executable, "-m", "rosettaserve", "scheduler", "--http-port", "0"]
    # a DNS name: the scheduler logs the instance it finds through it
    cmd += ["--prefill", "http://localhost:9", "--decode", "http://127.0.0.1:9"]
    cmd += ["--log-format", "json", "--header-timeout", "1", "--body-timeout", "1"]
    cmd += ["--max-request-line", str(MAX_LINE), "--max-header-size", str(MAX_HEADER)]
    proc, lines, addresses = launch(cmd, ("http",))
    yield from served(ServerProcess(proc, addresses["http"], lines))


def test_a_long_request_target_is_414(scheduler: ServerProcess) -> None:
    with Client(scheduler) as c:
        c.send(get(b"/v1/completions?" + b"q" * MAX_LINE))
        answer = c.answer()
        assert answer.status == 414
        assert b"--max-request-line" in answer.body
        assert c.closed()


def test_large_header_fields_are_431(scheduler: ServerProcess) -> None:
    with Client(scheduler) as c:
        c.send(get(b"/v1/models", b"x-big: %s\r\n" % (b"v" * MAX_HEADER)))
        assert c.answer().status == 431


def test_a_late_head_and_a_stalled_body_are_408(scheduler: ServerProcess) -> None:
    with Client(scheduler) as c:
        c.send(b"GET /v1/models HTTP/1.1\r\nHost: t\r\n")  # the head never ends
        answer = c.answer()
        assert answer.status == 408
        assert b"--header-timeout" in answer.body
    with Client(scheduler) as c:
        c.send(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n{")
        answer = c.answer(b"POST")
        assert answer.status == 408
        assert b"--body-timeout" in answer.body


def test_log_lines_are_json(scheduler: ServerProcess) -> None:
    def logged() -> list[dict[str, object]]:
        return [json.loads(line) for line in list(scheduler.lines) if line.startswith("{")]

    eventually(lambda: bool(logged()))
    record = logged()[0]
    assert record["logger"] == "rosettaserve.pd.scheduler"
    assert "found through http://localhost:9" in str(record["msg"])
    assert {"ts", "level", "msg"} <= set(record)
