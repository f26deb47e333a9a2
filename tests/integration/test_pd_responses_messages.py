"""The Responses and Messages APIs through a scheduler, a prefill and a decode instance (real
processes on loopback), against a mixed instance: the same greedy text, stream and not, the
same events, and the official clients unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from tests.pdproc import llm_repo, start_instance, start_scheduler, status
from tests.serverproc import ServerProcess, served, start_server, stop_cleanly

MODEL = "tiny_llama"
STORY = [{"role": "user", "content": "Tell me a story."}]
REQUESTS = [  # path, body
    ("/v1/responses", {"model": MODEL, "input": "Tell me a story.", "temperature": 0}),
    (
        "/v1/responses",
        {
            "model": MODEL,
            "input": STORY,
            "instructions": "Be terse.",
            "max_output_tokens": 9,
            "temperature": 0,  # Responses samples at 1 by default: the answers would differ
        },
    ),
    ("/v1/messages", {"model": MODEL, "messages": STORY, "max_tokens": 60, "temperature": 0}),
    (
        "/v1/messages",
        {
            "model": MODEL,
            "messages": STORY,
            "max_tokens": 60,
            "temperature": 0,
            "system": "Be terse.",
            "stop_sequences": [" a "],
        },
    ),
]
VARYING = {"id", "item_id", "created_at", "store"}  # the store: nothing is kept under PD


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return llm_repo(tmp_path_factory.mktemp("pd_apis_repo"))


@pytest.fixture(scope="module")
def mixed(repo: Path) -> Iterator[ServerProcess]:
    yield from served(start_server(repo))


@pytest.fixture(scope="module")
def cluster(repo: Path) -> Iterator[dict[str, ServerProcess]]:
    p = start_instance(repo, "prefill")
    d = start_instance(repo, "decode")
    s = start_scheduler([p], [d], "--policy", "round-robin")
    yield {"prefill": p, "decode": d, "scheduler": s}
    for proc in (s, p, d):
        stop_cleanly(proc)


def same(doc: Any) -> Any:
    """A reply or event with what differs between any two responses taken out."""
    if isinstance(doc, dict):
        return {k: same(v) for k, v in doc.items() if k not in VARYING}
    if isinstance(doc, list):
        return [same(v) for v in doc]
    return doc


def ids(doc: Any) -> set[str]:
    """Every id in a reply or event."""
    if isinstance(doc, dict):
        found = {v for k, v in doc.items() if k in ("id", "item_id") and isinstance(v, str)}
        return found.union(*(ids(v) for v in doc.values()))
    return set().union(*(ids(v) for v in doc)) if isinstance(doc, list) else set()


def events(body: bytes) -> list[Any]:
    docs = [orjson.loads(e.split(b"data: ", 1)[1]) for e in body.split(b"\n\n") if e]
    # the prefill and decode halves of one response share its ids (resp_X and msg_X, or msg_X)
    assert len({i.partition("_")[2] for i in ids(docs)}) == 1
    return [same(d) for d in docs]


def ask(url: str, path: str, doc: dict[str, Any], stream: bool) -> Any:
    with httpx.Client(base_url=url, timeout=60) as client:
        reply = client.post(path, content=orjson.dumps({**doc, "stream": stream}))
        assert reply.status_code == 200, reply.text
        return events(reply.content) if stream else same(reply.json())


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("path", "doc"), REQUESTS)
def test_the_same_answers_as_a_mixed_instance(
    cluster: dict[str, ServerProcess],
    mixed: ServerProcess,
    path: str,
    doc: dict[str, Any],
    stream: bool,
) -> None:
    expected = ask(mixed.http_url, path, doc, stream)
    assert ask(cluster["scheduler"].http_url, path, doc, stream) == expected


def test_requests_really_were_split(cluster: dict[str, ServerProcess]) -> None:
    before = status(cluster["decode"])["decode"]["finished"]
    ask(cluster["scheduler"].http_url, *REQUESTS[0], stream=True)
    ask(cluster["scheduler"].http_url, *REQUESTS[2], stream=True)
    assert status(cluster["decode"])["decode"]["finished"] == before + 2


def test_the_clients_through_the_scheduler(
    cluster: dict[str, ServerProcess], mixed: ServerProcess
) -> None:
    via, ref = (
        openai.OpenAI(base_url=s.http_url + "/v1", api_key="unused", max_retries=0)
        for s in (cluster["scheduler"], mixed)
    )
    kw: dict[str, Any] = {"model": MODEL, "input": "Tell me a story.", "temperature": 0}
    expected = ref.responses.create(**kw).output_text
    assert via.responses.create(**kw).output_text == expected
    with via.responses.stream(**kw) as stream:
        final = stream.get_final_response()
    assert final.output_text == expected
    with pytest.raises(openai.BadRequestError, match="prefill/decode"):
        via.responses.create(**kw, previous_response_id="resp_1")
    claude_via, claude_ref = (
        anthropic.Anthropic(base_url=s.http_url, api_key="unused", max_retries=0)
        for s in (cluster["scheduler"], mixed)
    )
    args: dict[str, Any] = {"model": MODEL, "max_tokens": 60, "messages": STORY}
    args["extra_body"] = {"temperature": 0}
    done = claude_ref.messages.create(**args)
    assert claude_via.messages.create(**args).content == done.content
    with claude_via.messages.stream(**args) as streamed:
        assert "".join(streamed.text_stream) == done.content[0].text  # type: ignore[union-attr]
    counted = claude_via.messages.count_tokens(model=MODEL, messages=STORY)  # type: ignore[arg-type]
    assert counted.input_tokens == done.usage.input_tokens
    with pytest.raises(openai.NotFoundError):  # nothing is kept under PD
        via.responses.retrieve(via.responses.create(**kw).id)
