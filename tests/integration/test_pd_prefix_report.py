"""Cache-aware routing made exact (pd/prefix_report.py), with real processes: two prefill
instances whose prefix caches hold one prompt each report what they hold, the scheduler sends a
prompt back where it is held, and once the instance's cache evicted it, no longer there."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from rosettaserve.pd.prefix_affinity import prompt_blocks
from rosettaserve.pd.prefix_report import read_report
from tests.pdproc import eventually, instances, llm_repo, start_instance, start_scheduler, status
from tests.serverproc import ServerProcess, stop_cleanly

PATH = "/v1/completions"
CHARS = 520  # 2 text blocks; the tiny Llama makes one token of each of these letters
LETTERS = "abcdghijkmnopq"  # (not e, f, l: two of them make one token)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    # a prefix cache of 33 blocks of 16 tokens: one prompt's 32, a second evicts the first's
    repo = llm_repo(tmp_path_factory.mktemp("pd_prefix"), prefix_cache_tokens=528,
                    max_model_len=1024)  # fmt: skip
    prefills = [start_instance(repo, "prefill") for _ in range(2)]
    decode = start_instance(repo, "decode")
    scheduler = start_scheduler(prefills, [decode])
    yield {"prefill": prefills, "scheduler": scheduler}
    for proc in (scheduler, *prefills, decode):
        stop_cleanly(proc)


def doc(letter: str) -> dict[str, Any]:
    return {"model": "tiny_llama", "prompt": letter * CHARS, "max_tokens": 2}


def first_block(letter: str) -> bytes:
    return prompt_blocks(PATH, httpx.Request("POST", "/", json=doc(letter)).read())[0]


def holds(p: ServerProcess, letter: str) -> bool:
    """``p``'s own report (asked without keys: as its peers) says it holds the prompt."""
    return first_block(letter) in (read_report(status(p)) or frozenset())


def view(scheduler: ServerProcess, p: ServerProcess) -> dict[str, Any]:
    (found,) = [i for i in instances(scheduler)["prefill"] if i["url"] == p.http_url]
    return dict(found)


def polled_again(scheduler: ServerProcess, p: ServerProcess) -> None:
    """Wait for a status of ``p`` the scheduler asked for after now."""
    seen = view(scheduler, p)["statuses"]
    eventually(lambda: view(scheduler, p)["statuses"] >= seen + 2)


def test_a_prefix_goes_where_it_is_held_and_not_once_evicted(cluster: dict[str, Any]) -> None:
    scheduler, prefills = cluster["scheduler"], cluster["prefill"]
    eventually(lambda: all(view(scheduler, p)["prefix_blocks"] == 0 for p in prefills))
    with httpx.Client(base_url=scheduler.http_url, timeout=60) as client:

        def send(letter: str) -> None:
            r = client.post(PATH, json=doc(letter))
            assert r.status_code == 200, r.text

        def hits() -> int:
            return int(instances(scheduler)["prefix"]["hits"])

        send("a")
        (held_a,) = [p for p in prefills if holds(p, "a")]
        eventually(lambda: view(scheduler, held_a)["prefix_blocks"] == 1)
        send("a")  # back where it is held: a hit
        assert hits() == 1
        assert holds(held_a, "a")
        others = iter(LETTERS[1:])
        while holds(held_a, "a"):  # new prompts, until one lands on held_a and evicts "a"
            send(next(others))
        polled_again(scheduler, held_a)
        assert hits() == 1  # (each new prompt shares nothing)
        send("a")  # the scheduler's table alone would send it to held_a, as a hit
        assert hits() == 1
