"""Prefill/decode across hosts: the scheduler, a prefill instance and decode instances each on
a host of its own (network namespaces, tests/multihost/netns.py), reached by host name.

The scheduler is given names, as it is in Kubernetes (headless Services): ``prefill`` and
``decode``, which its name map resolves to the instances' addresses; the prefill instance
knows its peers by the same ``decode`` name (``--peer-allow``), and advertises itself by its
host name, which the decode instances know it by. A decode host added to the name joins (the
prefill instance finds it there too); the decode host whose process is killed mid-stream costs
its client an error in its family's form, within 10 s, and the next request goes through the
other one."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.test_llm_families import LLM_FAMILIES, PROMPTS
from tests.integration.test_pd_faults import ENDLESS, LongStream
from tests.multihost.netns import Host, Network
from tests.pdproc import eventually, instances, llm_repo, status
from tests.serverproc import ServerProcess, stop_cleanly, wait_until_ready

PORT = 8000


def serve(net: Network, host: Host, repo: Path, *args: str) -> ServerProcess:
    return net.start(host, "serve", str(repo), "--host", "0.0.0.0", "--http-port", str(PORT),
                     "--grpc-port", "8001", *args)  # fmt: skip


@pytest.fixture(scope="module")
def hosts(
    network: Callable[[str], Network], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    net = network("p")
    h = {name: net.add_host(name, octet) for name, octet in
         [("client", 10), ("sched", 2), ("prefill-a", 3), ("decode-a", 4), ("decode-b", 5),
          ("mixed", 6)]}  # fmt: skip
    # the names, as a headless Service's: decode-b is not behind "decode" yet
    services(net, h, ["decode-a"])
    repo = llm_repo(tmp_path_factory.mktemp("multihost_pd"), max_model_len=400_000)
    procs = {
        "prefill-a": serve(net, h["prefill-a"], repo, "--role", "prefill",
                           "--advertise-host", "prefill-a", "--peer-allow", f"http://decode:{PORT}"),
        "decode-a": serve(net, h["decode-a"], repo, "--role", "decode",
                          "--peer-allow", f"prefill-a:{PORT}"),
        "decode-b": serve(net, h["decode-b"], repo, "--role", "decode",
                          "--peer-allow", f"prefill-a:{PORT}"),
        "mixed": serve(net, h["mixed"], repo),
    }  # fmt: skip
    procs["sched"] = net.start(
        h["sched"], "scheduler", "--host", "0.0.0.0", "--http-port", str(PORT),
        "--prefill", f"http://prefill:{PORT}", "--decode", f"http://decode:{PORT}",
        "--discovery-interval", "0.5", "--token-timeout", "30", "--policy", "round-robin",
    )  # fmt: skip
    with net.inside(h["client"]):
        for proc in procs.values():
            wait_until_ready(proc)
    yield {"net": net, "hosts": h, "procs": procs}
    with net.inside(h["client"]):  # a clean stop, where the test left the process running
        for proc in procs.values():
            if proc.proc.poll() is None:
                stop_cleanly(proc)


def services(net: Network, h: dict[str, Host], decode: list[str]) -> None:
    """The headless Services' names on the hosts that look them up (the scheduler's and the
    prefill host's maps): ``prefill`` and ``decode``, the latter with these decode hosts."""
    names = {"prefill": [h["prefill-a"].ip], "decode": [h[name].ip for name in decode]}
    for host in ("sched", "prefill-a"):
        net.name_map(h[host], names)


@pytest.fixture
def client(hosts: dict[str, Any]) -> Iterator[None]:
    """The test body runs on the client host."""
    with hosts["net"].inside(hosts["hosts"]["client"]):
        yield


def listed(hosts: dict[str, Any], role: str) -> dict[str, dict[str, Any]]:
    """The scheduler's instances of ``role`` that are in their name now, by URL."""
    found = instances(hosts["procs"]["sched"])[role]
    return {i["url"]: i for i in found if i["listed"]}


@pytest.mark.usefixtures("client")
def test_the_instances_are_found_by_name(hosts: dict[str, Any]) -> None:
    h = hosts["hosts"]
    eventually(lambda: all(i["healthy"] for i in listed(hosts, "decode").values()))
    prefill, decode = listed(hosts, "prefill"), listed(hosts, "decode")
    assert list(prefill) == [f"http://{h['prefill-a'].ip}:{PORT}"]
    assert prefill[f"http://{h['prefill-a'].ip}:{PORT}"]["source"] == f"http://prefill:{PORT}"
    assert list(decode) == [f"http://{h['decode-a'].ip}:{PORT}"]
    assert all(i["healthy"] for i in [*prefill.values(), *decode.values()])


@pytest.mark.usefixtures("client")
@pytest.mark.parametrize("family", LLM_FAMILIES)
def test_every_family_across_hosts_gives_the_mixed_text(hosts: dict[str, Any], family: str) -> None:
    procs = hosts["procs"]
    call = LLM_FAMILIES[family]
    before = status(procs["decode-a"])["decode"]["finished"]
    with (
        httpx.Client(base_url=procs["sched"].http_url, timeout=60) as pd,
        httpx.Client(base_url=procs["mixed"].http_url, timeout=60) as ref,
    ):
        expected = {p: call(ref, p) for p in PROMPTS}
        assert all(expected.values())
        assert {p: call(pd, p) for p in PROMPTS} == expected
    # decoded on the decode host (a one-token answer ends at the prefill host: at least some)
    assert status(procs["decode-a"])["decode"]["finished"] > before
    assert status(procs["prefill-a"])["prefill"]["leases"] == 0  # every KV cache was fetched


@pytest.mark.usefixtures("client")
def test_a_decode_host_killed_mid_stream(hosts: dict[str, Any]) -> None:
    net, h, procs = hosts["net"], hosts["hosts"], hosts["procs"]
    # a second decode pod joins the name: the scheduler (and the prefill host) find it
    services(net, h, ["decode-a", "decode-b"])
    eventually(lambda: [i["healthy"] for i in listed(hosts, "decode").values()] == [True, True])
    chat = {"model": "tiny_llama", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    chat |= {"max_tokens": ENDLESS, "temperature": 0, "ignore_eos": True}
    stream = LongStream({"scheduler": procs["sched"]}, "/v1/chat/completions", chat)
    (victim,) = [n for n in ("decode-a", "decode-b") if status(procs[n])["decode"]["jobs"]]
    survivor = "decode-b" if victim == "decode-a" else "decode-a"
    procs[victim].proc.kill()
    killed_at = time.monotonic()
    body = stream.finished(timeout=10)  # an upper bound against a hang, not a measurement
    assert time.monotonic() - killed_at < 10
    events = [e for e in body.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]"
    error = orjson.loads(events[-2].removeprefix(b"data: "))["error"]
    assert "went away" in error["message"]
    stream.leave()
    # the next request is served, through the decode host that is left
    before = status(procs[survivor])["decode"]["finished"]
    with httpx.Client(base_url=procs["sched"].http_url, timeout=60) as pd:
        doc = {"inputs": "The quick brown", "parameters": {"max_new_tokens": 8}}
        reply = pd.post("/generate", json=doc)
    assert reply.status_code == 200, reply.text
    assert reply.json()["generated_text"]
    assert status(procs[survivor])["decode"]["finished"] == before + 1
    # the dead pod leaves the name: the scheduler drops it
    services(net, h, [survivor])
    eventually(lambda: list(listed(hosts, "decode")) == [f"http://{h[survivor].ip}:{PORT}"])
    eventually(lambda: len(instances(procs["sched"])["decode"]) == 1)
