"""The Responses and Messages APIs through a scheduler, a prefill and a decode instance (real
processes on loopback), against a mixed instance: the same greedy text, stream and not, the
same events, and the official clients unchanged. The scheduler keeps the Responses API's
responses: a ``previous_response_id`` conversation, ``GET`` and ``DELETE`` through it."""

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
VARYING = {"id", "item_id", "created_at", "previous_response_id"}
STORE = 2  # the scheduler's --responses-store: each test needs no more than two kept
FOLLOW_UP = {"model": MODEL, "input": "And then?", "max_output_tokens": 9, "temperature": 0}


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
    s = start_scheduler([p], [d], "--policy", "round-robin", "--responses-store", str(STORE))
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


def converse(url: str, stream: bool) -> list[Any]:
    """Two requests, the second naming the first as previous_response_id (kept from a stream's
    final event when ``stream``): both replies."""
    with httpx.Client(base_url=url, timeout=60) as client:
        replies, finals = [], []
        doc: dict[str, Any] = {**REQUESTS[1][1], "stream": stream}
        for _ in range(2):
            reply = client.post("/v1/responses", content=orjson.dumps(doc))
            assert reply.status_code == 200, reply.text
            replies.append(reply.content)
            finals.append(last_response(reply.content) if stream else reply.json())
            doc = {**FOLLOW_UP, "previous_response_id": finals[-1]["id"], "stream": stream}
    assert finals[1]["previous_response_id"] == finals[0]["id"]
    return [events(r) if stream else same(orjson.loads(r)) for r in replies]


def last_response(body: bytes) -> Any:
    return orjson.loads(body.rstrip(b"\n").rsplit(b"data: ", 1)[1])["response"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_previous_response_id_conversation_as_on_a_mixed_instance(
    cluster: dict[str, ServerProcess], mixed: ServerProcess, stream: bool
) -> None:
    expected = converse(mixed.http_url, stream)
    got = converse(cluster["scheduler"].http_url, stream)
    assert got == expected
    first = expected[0][-1]["response"] if stream else expected[0]
    assert first["store"] is True  # as on the mixed instance: the scheduler keeps it


def test_the_scheduler_answers_get_and_delete(cluster: dict[str, ServerProcess]) -> None:
    with httpx.Client(base_url=cluster["scheduler"].http_url, timeout=60) as client:
        made = client.post("/v1/responses", content=orjson.dumps(REQUESTS[0][1]))
        rid = made.json()["id"]
        assert client.get(f"/v1/responses/{rid}").content == made.content
        gone = client.delete(f"/v1/responses/{rid}")
        assert gone.json() == {"id": rid, "object": "response.deleted", "deleted": True}
        for again in (client.get(f"/v1/responses/{rid}"), client.delete(f"/v1/responses/{rid}")):
            assert again.status_code == 404
            assert again.json()["error"]["message"] == f"Response with id '{rid}' not found."
        unknown = {**FOLLOW_UP, "previous_response_id": rid}
        assert client.post("/v1/responses", content=orjson.dumps(unknown)).status_code == 404
        kept = client.post("/v1/responses", content=orjson.dumps(REQUESTS[0][1])).json()["id"]
        assert client.get(f"/v1/responses/{kept}").status_code == 200
    # the instances keep nothing: the scheduler does
    assert httpx.get(f"{cluster['prefill'].http_url}/v1/responses/{kept}").status_code == 404


def test_the_scheduler_store_is_bounded(cluster: dict[str, ServerProcess]) -> None:
    with httpx.Client(base_url=cluster["scheduler"].http_url, timeout=60) as client:
        made = [
            client.post("/v1/responses", content=orjson.dumps(REQUESTS[1][1])).json()["id"]
            for _ in range(STORE + 1)
        ]
        found = [client.get(f"/v1/responses/{rid}").status_code for rid in made]
    assert found == [404] + [200] * STORE  # the oldest went first


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
    first, ref_first = via.responses.create(**kw), ref.responses.create(**kw)
    more: dict[str, Any] = {"model": MODEL, "input": "And then?", "temperature": 0}
    then = via.responses.create(**more, previous_response_id=first.id)
    assert then.previous_response_id == first.id
    assert (
        then.output_text
        == ref.responses.create(**more, previous_response_id=ref_first.id).output_text
    )
    assert via.responses.retrieve(first.id).output_text == expected
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
    via.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        via.responses.retrieve(first.id)
