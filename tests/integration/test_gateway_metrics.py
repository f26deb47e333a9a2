"""The metrics the Gateway API Inference Extension's endpoint picker reads to route (its model
server protocol: vLLM's names), read with Prometheus' own parser while an LLM whose engine takes
one sequence at a time serves three streams: one running, two waiting, KV cache in use, and LoRA
state (none); then, the streams done, nothing running or waiting."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.pdproc import llm_repo
from tests.serverproc import ServerProcess, served, start_server, wait_for

STREAMS = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = llm_repo(tmp_path_factory.mktemp("gateway"), max_num_seqs=1)
    yield from served(start_server(repo))


def picker_view(server: ServerProcess) -> dict[str, list[Any]]:
    """The families the endpoint picker reads, as Prometheus parses them."""
    text = httpx.get(server.http_url + "/metrics", timeout=10).text
    wanted = {"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
              "vllm:lora_requests_info"}  # fmt: skip
    found = {}
    for family in text_string_to_metric_families(text):
        if family.name in wanted:
            assert family.type == "gauge", family.name
            found[family.name] = family.samples
    return found


def value(view: dict[str, list[Any]], name: str) -> float:
    (sample,) = view[name]
    assert sample.labels == {"model_name": "tiny_llama"}
    return float(sample.value)


def stream(server: ServerProcess) -> None:
    body = {"model": "tiny_llama", "prompt": "Once upon a time", "max_tokens": 400,
            "ignore_eos": True, "stream": True}  # fmt: skip
    url = server.http_url + "/v1/completions"
    with httpx.stream("POST", url, json=body, timeout=300) as reply:
        assert reply.status_code == 200
        for _ in reply.iter_bytes():
            pass


def test_queue_running_kv_and_lora_mean_what_the_picker_reads(server: ServerProcess) -> None:
    clients = [threading.Thread(target=stream, args=(server,)) for _ in range(STREAMS)]
    for client in clients:
        client.start()
    busy: dict[str, list[Any]] = {}

    def saturated() -> bool:
        busy.update(picker_view(server))
        return value(busy, "vllm:num_requests_waiting") == STREAMS - 1

    wait_for(saturated, timeout=120)
    assert value(busy, "vllm:num_requests_running") == 1  # max_num_seqs: 1
    assert 0 < value(busy, "vllm:kv_cache_usage_perc") <= 1
    (lora,) = busy["vllm:lora_requests_info"]
    assert lora.labels == {"max_lora": "0", "running_lora_adapters": "",
                           "waiting_lora_adapters": ""}  # fmt: skip
    assert lora.value > 1.7e9  # the time of the reading, as vLLM's
    for client in clients:
        client.join(300)
    idle = picker_view(server)
    assert value(idle, "vllm:num_requests_waiting") == value(idle, "vllm:num_requests_running") == 0
