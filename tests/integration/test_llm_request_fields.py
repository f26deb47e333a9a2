"""Request fields vLLM builds are built here too, or refused with a 400: never accepted and
ignored. The official openai client (vLLM's fields in ``extra_body``) and plain HTTP, against a
server with the default flags and one with --trust-request-chat-template."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from transformers import AutoTokenizer

from tests.conftest import EXAMPLES
from tests.serverproc import ServerProcess, served, start_server

MESSAGES = [{"role": "user", "content": "The quick brown"}]
UNTRUSTED = (
    "Chat template is passed with request, but --trust-request-chat-template is not set. "
    "Refused request with untrusted chat template."
)
CONTENT_ONLY = "{% for m in messages %}{{ greeting }}{{ m['content'] }}{% endfor %}"


def start(tmp_path_factory: pytest.TempPathFactory, *args: str) -> ServerProcess:
    repo = tmp_path_factory.mktemp("fields_repo")
    shutil.copytree(EXAMPLES / "tiny_llama", repo / "tiny_llama")
    return start_server(repo, *args)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from served(start(tmp_path_factory))


@pytest.fixture(scope="module")
def trusting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from served(start(tmp_path_factory, "--trust-request-chat-template"))


def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0)


def chat(server: ServerProcess, **extra: Any) -> Any:
    return client(server).chat.completions.create(
        model="tiny_llama",
        messages=MESSAGES,
        max_tokens=8,
        temperature=0,
        extra_body=extra,  # type: ignore[arg-type]
    )


def completion(server: ServerProcess, prompt: str, **extra: Any) -> Any:
    return client(server).completions.create(
        model="tiny_llama", prompt=prompt, max_tokens=8, temperature=0, extra_body=extra
    )


def refusal(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(openai.BadRequestError) as caught:
        call(*args, **kwargs)
    return str(caught.value.body["message"])  # type: ignore[index]


def templated(**variables: Any) -> str:
    tokenizer = AutoTokenizer.from_pretrained(EXAMPLES / "tiny_llama", local_files_only=True)
    return str(tokenizer.apply_chat_template(MESSAGES, tokenize=False, **variables))


# -- chat templates -----------------------------------------------------------------------------


def test_chat_template_kwargs_reach_the_template_as_in_transformers(server: ServerProcess) -> None:
    """add_generation_prompt off (vLLM's own field): the prompt is the template's without the
    assistant's header, and the answer is the completion of exactly that text; in
    chat_template_kwargs it changes nothing, as in vLLM (the request's own fields win)."""
    default = chat(server)
    assert (
        default.usage.prompt_tokens
        == completion(server, templated(add_generation_prompt=True)).usage.prompt_tokens
    )
    bare = templated(add_generation_prompt=False)
    expected = completion(server, bare)
    built = chat(server, add_generation_prompt=False)
    assert built.usage.prompt_tokens == expected.usage.prompt_tokens
    assert built.usage.prompt_tokens < default.usage.prompt_tokens
    assert built.choices[0].message.content == expected.choices[0].text
    overridden = chat(server, chat_template_kwargs={"add_generation_prompt": False})
    assert overridden.usage.prompt_tokens == default.usage.prompt_tokens
    assert overridden.choices[0].message.content == default.choices[0].message.content
    unused = chat(server, chat_template_kwargs={"enable_thinking": False})  # as vLLM: accepted
    assert unused.choices[0].message.content == default.choices[0].message.content


def test_chat_template_kwargs_may_not_replace_the_calls_arguments(server: ServerProcess) -> None:
    for key in ("messages", "tools", "tokenize", "conversation"):
        message = refusal(chat, server, chat_template_kwargs={key: []})
        assert message.startswith(f"'chat_template_kwargs.{key}' may not be set")


def test_a_requests_template_is_refused_by_default_as_vllm_does(server: ServerProcess) -> None:
    assert refusal(chat, server, chat_template=CONTENT_ONLY) == UNTRUSTED
    kwargs = {"chat_template": CONTENT_ONLY}
    assert refusal(chat, server, chat_template_kwargs=kwargs) == UNTRUSTED


def test_a_trusted_template_is_rendered_with_the_requests_variables(
    trusting: ServerProcess,
) -> None:
    built = chat(trusting, chat_template=CONTENT_ONLY, chat_template_kwargs={"greeting": "Oh, "})
    expected = completion(trusting, "Oh, The quick brown")
    assert built.usage.prompt_tokens == expected.usage.prompt_tokens
    assert built.choices[0].message.content == expected.choices[0].text


def test_a_trusted_template_runs_in_the_sandbox(trusting: ServerProcess) -> None:
    escape = "{{ cycler.__init__.__globals__.os.popen('id').read() }}"
    message = refusal(chat, trusting, chat_template=escape)
    assert message.startswith("the chat template rejected the messages")
    assert "unsafe" in message


# -- prompt logprobs and fields not built --------------------------------------------------------


def test_prompt_logprobs_are_refused_by_the_builtin_engine(server: ServerProcess) -> None:
    for call, args in ((chat, (server,)), (completion, (server, "The quick brown"))):
        message = refusal(call, *args, prompt_logprobs=1)
        assert message.startswith("'prompt_logprobs' is not supported by model 'tiny_llama'")
    reply = httpx.post(
        server.http_url + "/generate", json={"prompt": "hi", "prompt_logprobs": 1}, timeout=60
    )
    assert reply.status_code == 400
    assert reply.json()["error"].startswith("'prompt_logprobs' is not supported")


@pytest.mark.parametrize(
    "extra",
    [
        {"structural_tag": "{}"},
        {"use_beam_search": True},
        {"cache_salt": "tenant-a"},
        {"echo": True},
    ],
)
def test_fields_not_built_are_a_400_naming_them(server: ServerProcess, extra: Any) -> None:
    (key,) = extra
    assert refusal(chat, server, **extra) == f"'{key}' is not supported by this server"


# -- the neighbour ------------------------------------------------------------------------------

CHAT = "/v1/chat/completions"
HOSTILE: list[tuple[str, dict[str, Any], int]] = [
    (CHAT, {"chat_template": "{% for i in range(99999) %}x{% endfor %}"}, 400),
    (CHAT, {"chat_template_kwargs": {"tokenize": True}}, 400),
    (CHAT, {"chat_template_kwargs": {"x": "y" * 100_000}, "max_tokens": 1}, 200),  # unused
    (CHAT, {"prompt_logprobs": 20}, 400),
    ("/v1/completions", {"prompt": "hi", "prompt_logprobs": 20}, 400),
    ("/v1/completions", {"prompt": "hi", "guided_regex": "("}, 400),
]


def test_refused_fields_beside_a_stream_leave_it_as_it_is_alone(server: ServerProcess) -> None:
    """A client streaming; another sends the refused fields (and an unused variable of 100 kB)
    while the stream runs: each gets its answer, and the stream's text is exactly its text
    alone."""
    doc = {"model": "tiny_llama", "prompt": "Once upon a time", "max_tokens": 24,
           "temperature": 0, "stream": True}  # fmt: skip

    def streamed(during: bool) -> str:
        texts = []
        with (
            httpx.Client(base_url=server.http_url, timeout=60) as other,
            httpx.stream("POST", server.http_url + "/v1/completions", json=doc, timeout=60) as r,
        ):
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                texts.append(orjson.loads(line[6:])["choices"][0]["text"])
                if during and len(texts) == 1:  # the stream has begun
                    for path, extra, status in HOSTILE:
                        body = {"model": "tiny_llama", "messages": MESSAGES, **extra}
                        assert other.post(path, json=body).status_code == status, (path, extra)
        return "".join(texts)

    alone = streamed(False)
    assert streamed(True) == alone
    assert len(alone) > 0
