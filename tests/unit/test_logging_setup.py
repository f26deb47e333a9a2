"""The server's log handler and formats: lines of a few milliseconds leave in one write, a
warning at once; the request id of the context in each line; text and JSON access lines."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from time import perf_counter

import pytest

from rosettaserve.observability import logging_setup
from rosettaserve.observability.access_log import AccessLog
from rosettaserve.observability.request_ids import REQUEST_ID, accepted, new_id


class Writes(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_lines_of_one_round_leave_in_one_write(restore_logging: None) -> None:
    out = Writes()
    logging_setup.configure("info", "text", stream=out)
    log = logging.getLogger("rosettaserve.test")

    async def round_of_lines() -> int:
        for n in range(5):
            log.info("line %d", n)
        written = out.writes
        await asyncio.sleep(0)
        log.info("line 5")  # a later round within the delay: the same write
        written += out.writes
        # a timer due after the flush's runs after it (timers run in the order they are due)
        await asyncio.sleep(logging_setup.FLUSH_DELAY_S * 2)
        return written

    assert asyncio.run(round_of_lines()) == 0
    assert out.writes == 1
    assert [line.split(": ", 1)[1] for line in out.getvalue().splitlines()] == [
        f"line {n}" for n in range(6)
    ]
    log.warning("at once")  # outside the loop, and a warning: written now
    assert out.writes == 2


def test_each_line_carries_the_request_id_of_its_context(restore_logging: None) -> None:
    out = io.StringIO()
    logging_setup.configure("debug", "text", stream=out)
    log = logging.getLogger("rosettaserve.test")
    token = REQUEST_ID.set("req-7")
    try:
        raise ValueError("why")
    except ValueError as exc:
        log.error("failed", exc_info=exc)
    finally:
        REQUEST_ID.reset(token)
    log.info("outside")
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("ERROR rosettaserve.test: failed request_id=req-7")
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[-1].endswith("INFO rosettaserve.test: outside")


def test_access_lines_in_text_and_json(restore_logging: None) -> None:
    out = io.StringIO()
    logging_setup.configure("info", "text", stream=out)
    AccessLog().line("grpc", "/s/Rpc", "-", 0, 12, start=perf_counter(), request_id="r-1")
    text = out.getvalue().strip()
    assert text.split("rosettaserve.access: ")[1].split()[:5] == ["grpc", "/s/Rpc", "-", "0", "12"]
    assert text.endswith("ms r-1")
    out = io.StringIO()
    logging_setup.configure("info", "json", stream=out)
    AccessLog().line("http", "GET", "/v2", 200, 99, start=perf_counter(), request_id="r-2")
    doc = json.loads(out.getvalue())
    assert {k: doc[k] for k in ("level", "logger", "request_id", "method", "status", "bytes")} == {
        "level": "INFO",
        "logger": "rosettaserve.access",
        "request_id": "r-2",
        "method": "GET",
        "status": 200,
        "bytes": 99,
    }


def test_access_lines_cost_nothing_below_info(restore_logging: None) -> None:
    out = io.StringIO()
    logging_setup.configure("warning", "text", stream=out)
    AccessLog().line("http", "GET", "/v2", 200, 99, start=perf_counter(), request_id="r-3")
    assert out.getvalue() == ""


def test_request_ids() -> None:
    made = {new_id() for _ in range(100)}
    assert len(made) == 100
    assert accepted("abc-DEF_1.2") == "abc-DEF_1.2"
    for unfit in ("", "a b", "x" * 129, "caf\u00e9", "line\nbreak", None):
        assert accepted(unfit) not in ("", unfit)


@pytest.mark.parametrize("fmt", logging_setup.FORMATS)
def test_access_lines_skip_logging_yet_read_as_its_lines(
    restore_logging: None, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer's line is the one the handler's formatter makes of an access record, the
    time aside; and a loop round answering many requests holds ``MAX_PENDING`` lines at most."""
    out = Writes()
    logging_setup.configure("info", fmt, tag="w1", stream=out)
    assert logging_setup.ACCESS is not None
    args = ("http", "POST", "/v2/models/m/infer", 200, 153)

    def line() -> str:
        """The last line written, without what differs from one line to the next (the time)."""
        AccessLog().line(*args, start=perf_counter(), request_id="r-9")
        text = out.getvalue().splitlines()[-1]
        if fmt == "json":
            doc = {**json.loads(text), "ts": "", "duration_ms": 0, "msg": ""}
            return json.dumps(doc, sort_keys=True)  # (an object: its keys in any order)
        head, tail = text.split(" ", 2)[2].rsplit(" ", 2)[0], text.rsplit(" ", 1)[1]
        return f"{head} {tail}"

    fast = line()
    monkeypatch.setattr(logging_setup, "ACCESS", None)  # through logging
    assert line() == fast
    monkeypatch.undo()

    async def many() -> int:
        for _ in range(logging_setup.MAX_PENDING * 3):
            AccessLog().line(*args, start=perf_counter(), request_id="r-10")
        return out.writes

    before = out.writes
    assert asyncio.run(many()) == before + 3
