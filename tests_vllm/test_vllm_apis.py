"""The Responses and Messages APIs on ``runtime: vllm``: the greedy text equals the chat
completion of the same messages, streamed and not, and vLLM's own ``/v1/responses`` answer."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from tests_vllm.conftest import MODEL

MESSAGES = [{"role": "user", "content": "Tell me about the fox"}]
MAX_NEW = 24


def sse(body: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(e.split(b"data: ", 1)[1]) for e in body.split(b"\n\n") if b"data: " in e]


def chat(client: httpx.Client) -> str:
    doc = {"model": MODEL, "messages": MESSAGES, "max_tokens": MAX_NEW, "temperature": 0}
    return str(
        client.post("/v1/chat/completions", json=doc).json()["choices"][0]["message"]["content"]
    )


def responses(client: httpx.Client, stream: bool = False) -> str:
    doc = {"model": MODEL, "input": MESSAGES, "max_output_tokens": MAX_NEW, "temperature": 0}
    reply = client.post("/v1/responses", json={**doc, "stream": stream})
    assert reply.status_code == 200, reply.text
    if stream:
        events = sse(reply.content)
        return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    return str(reply.json()["output"][0]["content"][0]["text"])


def messages(client: httpx.Client, stream: bool = False) -> str:
    doc = {"model": MODEL, "messages": MESSAGES, "max_tokens": MAX_NEW, "temperature": 0}
    reply = client.post("/v1/messages", json={**doc, "stream": stream})
    assert reply.status_code == 200, reply.text
    if stream:
        events = sse(reply.content)
        return "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    return str(reply.json()["content"][0]["text"])


def test_both_apis_give_the_chat_completion(http: httpx.Client, vllm_http: httpx.Client) -> None:
    expected = chat(http)
    assert expected
    assert chat(vllm_http) == expected
    got = [responses(http), responses(http, True), messages(http), messages(http, True)]
    assert got == [expected] * 4
    assert responses(vllm_http) == expected  # vLLM's own Responses API
