"""The LLM API families over one engine, on a real server: the official `openai` and
`text-generation` clients, plain HTTP for vLLM, Triton generate, MindIE and Ollama, each
family's exact stream framing, and greedy output that is the same everywhere, alone and under
concurrency."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import orjson
import pytest
from text_generation import Client as TgiClient
from text_generation import errors as tgi_errors
from transformers import AutoTokenizer

from tests.conftest import EXAMPLES
from tests.serverproc import ServerProcess, served, start_server

PROMPTS = ["The quick brown", "Once upon a time", "你好", "In the café on the corner", "hi"]
MAX_NEW = 24
Family = Callable[[httpx.Client, str], str]


@pytest.fixture(scope="module")
def llm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("llm_repo")
    shutil.copytree(EXAMPLES / "tiny_llama", repo / "tiny_llama")
    yield from served(start_server(repo))


@pytest.fixture(scope="module")
def http(llm_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=llm_server.http_url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def oai(llm_server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=llm_server.http_url + "/v1", api_key="unused", max_retries=0)


def post(client: httpx.Client, path: str, doc: dict[str, object]) -> httpx.Response:
    return client.post(
        path, content=orjson.dumps(doc), headers={"content-type": "application/json"}
    )


def stream_body(client: httpx.Client, path: str, doc: dict[str, object]) -> tuple[str, bytes]:
    with client.stream("POST", path, content=orjson.dumps(doc)) as r:
        assert r.status_code == 200, r.read()
        return r.headers["content-type"], b"".join(r.iter_raw())


def sse_events(body: bytes, prefix: bytes, payload_start: bytes = b"") -> list[bytes]:
    """Split an SSE body, checking every event is exactly ``prefix<payload>\\n\\n``."""
    assert body.endswith(b"\n\n")
    events = body[:-2].split(b"\n\n")
    assert all(e.startswith(prefix + payload_start) for e in events), events[:3]
    return [e[len(prefix) :] for e in events]


# -- each family's greedy text, streaming and not ---------------------------------------------


def openai_completion(client: httpx.Client, prompt: str) -> str:
    doc = {"model": "tiny_llama", "prompt": prompt, "max_tokens": MAX_NEW, "temperature": 0}
    return str(post(client, "/v1/completions", doc).json()["choices"][0]["text"])


def openai_completion_stream(client: httpx.Client, prompt: str) -> str:
    doc = {"model": "tiny_llama", "prompt": prompt, "max_tokens": MAX_NEW, "temperature": 0}
    _, body = stream_body(client, "/v1/completions", {**doc, "stream": True})
    events = sse_events(body, b"data: ")
    assert events[-1] == b"[DONE]"
    return "".join(orjson.loads(e)["choices"][0]["text"] for e in events[:-1])


def tgi_generate(client: httpx.Client, prompt: str) -> str:
    doc = {"inputs": prompt, "parameters": {"max_new_tokens": MAX_NEW}}
    return str(post(client, "/generate", doc).json()["generated_text"])


def tgi_generate_stream(client: httpx.Client, prompt: str) -> str:
    doc = {"inputs": prompt, "parameters": {"max_new_tokens": MAX_NEW}}
    content_type, body = stream_body(client, "/generate_stream", doc)
    assert content_type == "text/event-stream"
    events = [orjson.loads(e) for e in sse_events(body, b"data:", b"{")]  # no space: TGI's framing
    assert [e["index"] for e in events] == list(range(1, len(events) + 1))
    assert all(e["generated_text"] is None for e in events[:-1])
    text = "".join(e["token"]["text"] for e in events)
    assert events[-1]["generated_text"] == text
    return text


def vllm_generate(client: httpx.Client, prompt: str) -> str:
    doc = {"prompt": prompt, "max_tokens": MAX_NEW, "temperature": 0}
    (text,) = post(client, "/generate", doc).json()["text"]
    assert text.startswith(prompt)
    return str(text[len(prompt) :])


def vllm_generate_stream(client: httpx.Client, prompt: str) -> str:
    doc = {"prompt": prompt, "max_tokens": MAX_NEW, "temperature": 0, "stream": True}
    _, body = stream_body(client, "/generate", doc)
    assert body.endswith(b"\n")
    chunks = [orjson.loads(line)["text"][0] for line in body[:-1].split(b"\n")]
    assert all(chunks[i + 1].startswith(chunks[i]) for i in range(len(chunks) - 1))  # cumulative
    return str(chunks[-1][len(prompt) :])


def triton_generate(client: httpx.Client, prompt: str) -> str:
    doc = {"text_input": prompt, "parameters": {"max_tokens": MAX_NEW}}
    reply = post(client, "/v2/models/tiny_llama/generate", doc).json()
    assert (reply["model_name"], reply["model_version"]) == ("tiny_llama", "1")
    return str(reply["text_output"])


def triton_generate_stream(client: httpx.Client, prompt: str) -> str:
    doc = {"text_input": prompt, "max_tokens": MAX_NEW}  # top-level parameters, as Triton allows
    content_type, body = stream_body(client, "/v2/models/tiny_llama/generate_stream", doc)
    assert content_type.startswith("text/event-stream")
    events = [orjson.loads(e) for e in sse_events(body, b"data:", b"{")]
    return "".join(e["text_output"] for e in events)


def mindie_infer(client: httpx.Client, prompt: str) -> str:
    doc = {"inputs": prompt, "parameters": {"max_new_tokens": MAX_NEW}}
    return str(post(client, "/infer", doc).json()["generated_text"])


def mindie_infer_stream(client: httpx.Client, prompt: str) -> str:
    doc = {"inputs": prompt, "stream": True, "parameters": {"max_new_tokens": MAX_NEW}}
    _, body = stream_body(client, "/infer", doc)
    events = [orjson.loads(e) for e in sse_events(body, b"data: ", b"{")]
    assert all(set(e) == {"prefill_time", "decode_time", "token"} for e in events[:-1])
    assert events[0]["prefill_time"] is not None
    assert events[-1]["token"]["text"] is None
    text = "".join(e["token"]["text"] for e in events[:-1])
    assert events[-1]["generated_text"].startswith(text)
    return str(events[-1]["generated_text"])


def ollama_generate(client: httpx.Client, prompt: str) -> str:
    doc = {"model": "tiny_llama", "prompt": prompt, "raw": True, "stream": False}
    doc["options"] = {"temperature": 0, "num_predict": MAX_NEW}
    reply = post(client, "/api/generate", doc).json()
    assert reply["done"]
    assert reply["eval_count"] <= MAX_NEW
    return str(reply["response"])


def ollama_generate_stream(client: httpx.Client, prompt: str) -> str:
    doc = {"model": "tiny_llama", "prompt": prompt, "raw": True}  # streamed unless told not to
    doc["options"] = {"temperature": 0, "num_predict": MAX_NEW}
    content_type, body = stream_body(client, "/api/generate", doc)
    assert content_type == "application/x-ndjson"
    lines = [orjson.loads(line) for line in body.splitlines()]
    assert [x["done"] for x in lines] == [False] * (len(lines) - 1) + [True]
    return "".join(x["response"] for x in lines)


def oip_infer(client: httpx.Client, prompt: str) -> str:
    tensor = {"name": "text_input", "datatype": "BYTES", "shape": [1], "data": [prompt]}
    doc = {"inputs": [tensor], "parameters": {"max_tokens": MAX_NEW}}
    (out,) = post(client, "/v2/models/tiny_llama/infer", doc).json()["outputs"]
    return str(out["data"][0])


FAMILIES: dict[str, Family] = {
    "openai": openai_completion,
    "openai-stream": openai_completion_stream,
    "tgi": tgi_generate,
    "tgi-stream": tgi_generate_stream,
    "vllm": vllm_generate,
    "vllm-stream": vllm_generate_stream,
    "triton": triton_generate,
    "triton-stream": triton_generate_stream,
    "mindie": mindie_infer,
    "mindie-stream": mindie_infer_stream,
    "ollama": ollama_generate,
    "ollama-stream": ollama_generate_stream,
    "oip": oip_infer,
}
LLM_FAMILIES = {k: v for k, v in FAMILIES.items() if k != "oip"}  # OIP is not an LLM API family
Job = tuple[str, str]  # family, prompt


def concurrently(url: str, jobs: list[Job], timeout: float = 60) -> dict[Job, str]:
    """The text of every (family, prompt) job, eight at a time, each on a client of its own."""

    def call(job: Job) -> tuple[Job, str]:
        with httpx.Client(base_url=url, timeout=timeout) as client:
            return job, FAMILIES[job[0]](client, job[1])

    with ThreadPoolExecutor(8) as pool:
        return dict(pool.map(call, jobs))


@pytest.fixture(scope="module")
def reference(http: httpx.Client) -> dict[str, str]:
    return {p: openai_completion(http, p) for p in PROMPTS}


def test_reference_output_is_real_text(reference: dict[str, str]) -> None:
    assert reference["The quick brown"].startswith(" fox")  # what the tiny model learned
    assert all(reference[p] for p in PROMPTS)
    assert len(set(reference.values())) == len(PROMPTS)


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_output_is_the_same_in_every_family(
    http: httpx.Client, reference: dict[str, str], family: str
) -> None:
    assert {p: FAMILIES[family](http, p) for p in PROMPTS} == reference


def test_greedy_output_is_the_same_under_8_concurrent_requests(
    llm_server: ServerProcess, reference: dict[str, str]
) -> None:
    results = concurrently(llm_server.http_url, [(f, p) for f in FAMILIES for p in PROMPTS])
    wrong = [(f, p, text) for (f, p), text in results.items() if text != reference[p]]
    assert wrong == []


# -- the official clients --------------------------------------------------------------------


def test_openai_client_completions_and_chat(oai: openai.OpenAI, reference: dict[str, str]) -> None:
    done = oai.completions.create(
        model="tiny_llama", prompt="The quick brown", max_tokens=MAX_NEW, temperature=0
    )
    assert done.choices[0].text == reference["The quick brown"]
    assert done.usage is not None
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (4, MAX_NEW)
    assert done.choices[0].finish_reason == "length"
    chat = oai.chat.completions.create(
        model="tiny_llama",
        messages=[{"role": "user", "content": "Tell me a story."}],
        max_tokens=60,
        temperature=0,
    )
    message = chat.choices[0].message
    assert message.role == "assistant"
    assert message.content == "Once upon a time there was a small server that spoke many languages."
    assert chat.choices[0].finish_reason == "stop"
    assert [m.id for m in oai.models.list()] == ["tiny_llama"]


def chat_prompt(llm_server: ServerProcess, messages: list[dict[str, str]]) -> str:
    tokenizer = AutoTokenizer.from_pretrained(EXAMPLES / "tiny_llama", local_files_only=True)
    return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))


def test_openai_client_streams_chat_with_usage(
    oai: openai.OpenAI, http: httpx.Client, llm_server: ServerProcess
) -> None:
    messages = [{"role": "user", "content": "Say hello in Chinese."}]
    chunks = list(
        oai.chat.completions.create(
            model="tiny_llama",
            messages=messages,  # type: ignore[arg-type]
            max_tokens=30,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop"
    assert set(finishes[:-1]) == {None}
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert all(c.usage is None for c in chunks[:-1])
    # the same text as TGI gives for the prompt the chat template makes
    templated = chat_prompt(llm_server, messages)
    assert text == tgi_generate(http, templated).split("<|im_end|>")[0]
    assert chunks[-1].usage.prompt_tokens == len(
        AutoTokenizer.from_pretrained(EXAMPLES / "tiny_llama")(templated)["input_ids"]
    )


def test_openai_n_stop_and_seed(oai: openai.OpenAI, reference: dict[str, str]) -> None:
    full = reference["The quick brown"]
    stop = full[10:14]
    cut = oai.completions.create(
        model="tiny_llama", prompt="The quick brown", max_tokens=MAX_NEW, temperature=0, stop=[stop]
    )
    assert cut.choices[0].text == full[: full.index(stop)]
    assert cut.choices[0].finish_reason == "stop"

    def sample(seed: int) -> list[str]:
        done = oai.completions.create(
            model="tiny_llama", prompt="Once upon", max_tokens=16, temperature=1.5, n=3, seed=seed
        )
        assert [c.index for c in done.choices] == [0, 1, 2]
        return [c.text for c in done.choices]

    assert sample(5) == sample(5)
    assert sample(5) != sample(6)


def test_openai_streamed_n_choices_interleave(http: httpx.Client) -> None:
    doc = {"model": "tiny_llama", "prompt": "Once upon", "max_tokens": 8, "temperature": 0}
    _, body = stream_body(http, "/v1/completions", {**doc, "n": 2, "stream": True})
    events = [orjson.loads(e) for e in sse_events(body, b"data: ")[:-1]]
    texts = {0: "", 1: ""}
    for e in events:
        (choice,) = e["choices"]
        texts[choice["index"]] += choice["text"]
    single = post(http, "/v1/completions", doc).json()["choices"][0]["text"]
    assert texts == {0: single, 1: single}


def test_openai_logprobs(http: httpx.Client) -> None:
    doc = {"model": "tiny_llama", "prompt": "The quick brown", "max_tokens": 5, "temperature": 0}
    choice = post(http, "/v1/completions", {**doc, "logprobs": 2}).json()["choices"][0]
    lp = choice["logprobs"]
    assert "".join(lp["tokens"]) == choice["text"]
    assert all(v <= 0 for v in lp["token_logprobs"])
    assert len(lp["top_logprobs"]) == 5
    chat = {
        "model": "tiny_llama",
        "messages": [{"role": "user", "content": "Count to five."}],
        "max_tokens": 5,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 2,
    }
    content = post(http, "/v1/chat/completions", chat).json()["choices"][0]["logprobs"]["content"]
    assert len(content) == 5
    assert all(len(c["top_logprobs"]) == 2 for c in content)


def test_text_generation_client(llm_server: ServerProcess, reference: dict[str, str]) -> None:
    client = TgiClient(llm_server.http_url, timeout=60)
    done = client.generate("The quick brown", max_new_tokens=MAX_NEW)
    assert done.generated_text == reference["The quick brown"]
    assert done.details.finish_reason.value == "length"
    assert done.details.generated_tokens == MAX_NEW == len(done.details.tokens)
    assert "".join(t.text for t in done.details.tokens) == done.generated_text
    events = list(client.generate_stream("The quick brown", max_new_tokens=MAX_NEW))
    assert "".join(e.token.text for e in events) == reference["The quick brown"]
    assert events[-1].generated_text == reference["The quick brown"]
    assert events[-1].details is not None
    assert events[-1].details.generated_tokens == MAX_NEW
    sampled = [
        client.generate("Once upon", max_new_tokens=12, do_sample=True, seed=3).generated_text
        for _ in range(2)
    ]
    assert sampled[0] == sampled[1]


def test_official_clients_raise_their_own_errors(
    oai: openai.OpenAI, llm_server: ServerProcess
) -> None:
    with pytest.raises(openai.BadRequestError, match="context window"):
        oai.completions.create(model="tiny_llama", prompt="hi", max_tokens=10**6)
    with pytest.raises(openai.NotFoundError) as missing:
        oai.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
    assert missing.value.code == "model_not_found"
    with pytest.raises(tgi_errors.ValidationError, match="context window"):
        TgiClient(llm_server.http_url).generate("hi", max_new_tokens=10**6)


# -- family specifics -------------------------------------------------------------------------


def test_tgi_details_return_full_text_and_info(http: httpx.Client) -> None:
    params = {"max_new_tokens": 6, "details": True, "decoder_input_details": True}
    doc = post(http, "/generate", {"inputs": "The quick brown", "parameters": params}).json()
    details = doc["details"]
    assert details["generated_tokens"] == 6
    assert details["finish_reason"] == "length"
    assert [t["text"] for t in details["prefill"]] == ["The", " qu", "ick", " brown"]
    full = post(
        http,
        "/generate",
        {
            "inputs": "The quick brown",
            "parameters": {"max_new_tokens": 6, "return_full_text": True},
        },
    ).json()
    assert full["generated_text"] == "The quick brown" + doc["generated_text"]
    compat = post(http, "/", {"inputs": "The quick brown", "parameters": {"max_new_tokens": 6}})
    assert compat.json() == [{"generated_text": doc["generated_text"]}]
    info = http.get("/info").json()
    assert info["model_id"] == "tiny_llama"
    assert info["max_total_tokens"] == 512
    health = http.get("/health")
    assert (health.status_code, health.content) == (200, b"")


def test_mindie_details_and_token_input(http: httpx.Client) -> None:
    params = {"max_new_tokens": 6, "details": True}
    text = post(http, "/infer", {"inputs": "The quick brown", "parameters": params}).json()
    ids = AutoTokenizer.from_pretrained(EXAMPLES / "tiny_llama")("The quick brown")["input_ids"]
    tokens = post(http, "/infer_token", {"input_id": ids, "parameters": params}).json()
    assert tokens == text
    assert text["details"]["generated_tokens"] == len(text["details"]["generated_token_ids"]) == 6


def test_triton_details_and_id(http: httpx.Client) -> None:
    doc = {"id": "req-7", "text_input": "hi", "parameters": {"max_tokens": 4, "details": True}}
    reply = post(http, "/v2/models/tiny_llama/versions/1/generate", doc).json()
    assert reply["id"] == "req-7"
    assert reply["details"]["generated_tokens"] == 4
    assert reply["details"]["finish_reason"] == "length"


def test_vllm_n_returns_every_sequence(http: httpx.Client) -> None:
    doc = {"prompt": "Once upon", "max_tokens": 8, "temperature": 1.2, "n": 3, "seed": 11}
    texts = post(http, "/generate", doc).json()["text"]
    assert len(texts) == 3
    assert all(t.startswith("Once upon") for t in texts)
    assert texts == post(http, "/generate", doc).json()["text"]


def test_bytes_of_multibyte_text_arrive_whole(http: httpx.Client) -> None:
    doc = {"model": "tiny_llama", "prompt": "你好", "max_tokens": 12, "temperature": 0}
    _, body = stream_body(http, "/v1/completions", {**doc, "stream": True})
    choices = [orjson.loads(e)["choices"][0] for e in sse_events(body, b"data: ")[:-1]]
    assert len(choices) > 3
    assert any(not c["text"].isascii() for c in choices)
    # only a length cut in the middle of a character may end in U+FFFD, as decode() does
    assert all("\ufffd" not in c["text"] for c in choices if c["finish_reason"] is None)
    assert (
        "".join(c["text"] for c in choices)
        == post(http, "/v1/completions", doc).json()["choices"][0]["text"]
    )


def test_the_repository_path_can_point_elsewhere(tmp_path: Path) -> None:
    folder = tmp_path / "elsewhere"
    shutil.copytree(EXAMPLES / "tiny_llama", folder)
    repo = tmp_path / "repo"
    (repo / "pointer").mkdir(parents=True)
    (repo / "pointer" / "model.yaml").write_text(
        f"runtime: llm\nparameters: {{path: {folder}, threads: 1, max_model_len: 64}}\n"
    )
    proc = start_server(repo)
    try:
        with httpx.Client(base_url=proc.http_url, timeout=60) as client:
            info = client.get("/info").json()
            assert (info["model_id"], info["max_total_tokens"]) == ("pointer", 64)
            assert tgi_generate(client, "The quick brown").startswith(" fox")
    finally:
        assert proc.stop() == 0
