"""Prefill and decode instances driven directly, as a MindIE-style coordinator drives them:
P's header checks, P's reply, D's /dresult stream (framing, one reader kept, heartbeat), the KV
handover, the flex shortcut, and the errors when a decode instance cannot take a request."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from rosettaserve.pd import wire
from tests.pdproc import eventually, llm_repo, start_instance, status
from tests.serverproc import ServerProcess, served

HEARTBEAT = "0.3"
LONG = 8000  # tokens: a request that runs until it is cancelled


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return llm_repo(tmp_path_factory.mktemp("pd_instances_repo"), max_model_len=LONG + 100)


@pytest.fixture(scope="module")
def prefill(repo: Path) -> Iterator[ServerProcess]:
    yield from served(start_instance(repo, "prefill"))


@pytest.fixture(scope="module")
def decode(repo: Path) -> Iterator[ServerProcess]:
    yield from served(start_instance(repo, "decode", "--dresult-heartbeat", HEARTBEAT))


class DResultReader:
    """A raw ``GET /dresult`` on a socket: the response head, then frames as they come."""

    def __init__(self, instance: ServerProcess) -> None:
        host, port = instance.http_hostport.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.sendall(b"GET /dresult HTTP/1.1\r\nhost: x\r\nuser-agent: coordinator\r\n\r\n")
        self.buffer = b""
        head = self._until(b"\r\n\r\n")
        self.status_line, *lines = head.decode("latin-1").split("\r\n")
        self.headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines)}
        self.parser = wire.FrameParser()
        self.frames: list[wire.Frame] = []
        self.ended = False

    def _until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed")
            self.buffer += data
        head, self.buffer = self.buffer.split(marker, 1)
        return head

    def _chunk(self) -> None:
        size = int(self._until(b"\r\n"), 16)
        if size == 0:
            self.ended = True
            return
        while len(self.buffer) < size + 2:
            self.buffer += self.sock.recv(65536)
        body, self.buffer = self.buffer[:size], self.buffer[size + 2 :]
        self.frames += self.parser.feed(body)

    def read_until(self, done: Any, timeout: float = 120.0) -> list[wire.Frame]:
        """Frames until ``done(frames)`` or the stream ends (heartbeats keep an idle stream
        open: the timeout is a guard against hanging, not a measurement)."""
        deadline = time.monotonic() + timeout
        while not done(self.frames) and not self.ended:
            assert time.monotonic() < deadline, f"never came: {len(self.frames)} frames so far"
            self._chunk()
        return self.frames

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def reader(decode: ServerProcess) -> Iterator[DResultReader]:
    r = DResultReader(decode)
    eventually(lambda: status(decode)["decode"]["dresultConnected"])
    yield r
    r.close()  # the next test's reader is refused until the instance saw this one go
    eventually(lambda: not status(decode)["decode"]["dresultConnected"])


KEY = "coordinator-job-key-0001"  # the job key a coordinator sends (pd-job-key)


def pd_headers(req_id: str, decode: ServerProcess, **extra: str) -> dict[str, str]:
    host, port = decode.http_hostport.rsplit(":", 1)
    return {**wire.prefill_headers(req_id, host, int(port), False, KEY), **extra}


def to_prefill(
    prefill: ServerProcess, path: str, doc: dict[str, Any], headers: dict[str, str]
) -> httpx.Response:
    return httpx.post(
        prefill.http_url + path, content=orjson.dumps(doc), headers=headers, timeout=60
    )


def of(frames: list[wire.Frame], req_id: str) -> list[wire.Frame]:
    return [f for f in frames if f.req_id == req_id]


def finished(req_id: str) -> Any:
    return lambda frames: any(f.kind != wire.DATA for f in of(frames, req_id))


# -- P's header checks ---------------------------------------------------------------------------

BODY = {"inputs": "The quick brown", "parameters": {"max_new_tokens": 8}}


@pytest.mark.parametrize(
    ("drop", "change", "message"),
    [
        ("req-id", {}, "'req-id' is required"),
        ("req-type", {}, "'req-type' is required"),
        ("d-target", {}, "'d-target' is required"),
        ("", {"req-type": "decode"}, "must be 'prefill'"),
        ("", {"req-id": "not-a-number"}, "hex digits"),
        ("", {"req-id": "zz!"}, "header 'req-id' must be hex digits, got 'zz!'"),
        ("", {"req-id": "a" * 1025}, "header 'req-id' is 1025 digits long; at most 1024"),
        ("", {"d-target": "decode.local;80"}, "IPv4"),
        ("", {"is-recompute": "maybe"}, "true or false"),
    ],
)
def test_bad_pd_headers_are_400_in_the_family_error_shape(
    prefill: ServerProcess, decode: ServerProcess, drop: str, change: dict[str, str], message: str
) -> None:
    headers = {k: v for k, v in pd_headers("1", decode, **change).items() if k != drop}
    r = to_prefill(prefill, "/generate", BODY, headers)
    assert r.status_code == 400
    assert set(r.json()) == {"error", "error_type"}  # TGI's error shape on a TGI route
    assert message in r.json()["error"]
    chat = to_prefill(
        prefill, "/v1/chat/completions", {"model": "tiny_llama", "messages": []}, headers
    )
    assert chat.status_code == 400
    assert set(chat.json()["error"]) == {"message", "type", "param", "code"}  # OpenAI's


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{}", "'reqId', 'jobKey', 'pNodeAddr', 'path', 'body', 'promptIds', 'deltas', 'seed'"),
        (b'{"reqId": "ab", "jobKey": "kkkkkkkkkkkkkkkk", "pNodeAddr": "127.0.0.1;1", '
         b'"path": "/generate", "body": "{}", "promptIds": [1], "deltas": [{"text": "x"}], '
         b'"seed": 1, "kvTokens": 1, "kvBytes": 9}', "'deltas[0]': a delta needs 'ids'"),
        (b"[]", "must be a JSON object"),
    ],
)  # fmt: skip
def test_malformed_decode_parameters_name_the_field(
    decode: ServerProcess, body: bytes, message: str
) -> None:
    r = httpx.post(decode.http_url + "/v1/pd/decode", content=body, timeout=10)
    assert r.status_code == 400
    doc = r.json()
    assert doc["isValidDecodeParameters"] is False
    assert message in doc["errorMessage"]
    assert "KeyError" not in doc["errorMessage"]


def test_instances_in_other_roles_refuse_pd_requests(
    prefill: ServerProcess, decode: ServerProcess
) -> None:
    r = to_prefill(decode, "/generate", BODY, pd_headers("2", decode))
    assert r.status_code == 400
    assert "not prefill" in r.json()["error"]
    assert httpx.get(prefill.http_url + "/dresult", timeout=10).status_code == 400
    plain = httpx.post(decode.http_url + "/generate", json=BODY, timeout=60)  # no PD headers
    assert plain.status_code == 200
    assert plain.json()["generated_text"]


def test_a_prefill_instance_that_is_not_ready_is_503(tmp_path: Path, decode: ServerProcess) -> None:
    repo = llm_repo(tmp_path / "repo")
    (repo / "broken").mkdir()
    (repo / "broken" / "model.yaml").write_text("runtime: llm\n")  # no model files: never loads
    proc = start_instance(repo, "prefill", wait_ready=False)
    try:
        eventually(
            lambda: httpx.get(proc.http_url + "/v2/health/live", timeout=5).status_code == 200
        )
        eventually(lambda: status(proc)["resource"]["availSlotsNum"] > 0)  # tiny_llama loaded
        assert status(proc)["service"] == {"roleStatus": "RoleUnknown", "currentRole": "prefill"}
        r = to_prefill(proc, "/generate", BODY, pd_headers("3", decode))
        assert r.status_code == 503
        assert "role status is unknown" in r.json()["error"]
    finally:
        assert proc.stop() == 0


# -- P's reply and D's frames ---------------------------------------------------------------------


def test_a_streaming_request_split_by_hand(
    prefill: ServerProcess, decode: ServerProcess, reader: DResultReader
) -> None:
    assert reader.status_line.startswith("HTTP/1.1 200")
    assert reader.headers["content-type"] == "text/event-stream"
    assert reader.headers["transfer-encoding"] == "chunked"
    doc = {"inputs": "Once upon a time", "parameters": {"max_new_tokens": 12}}
    r = to_prefill(prefill, "/generate_stream", doc, pd_headers("101", decode))
    assert r.status_code == 200
    reply = r.json()
    assert set(reply) == {"reqId", "isStream", "output", "isLastResp"}
    assert (reply["reqId"], reply["isStream"], reply["isLastResp"]) == ("101", True, False)
    assert reply["output"].startswith('data:{"index":1,')  # TGI's framing, token 1
    frames = of(reader.read_until(finished("101")), "101")
    assert [f.kind for f in frames] == [wire.DATA] * 10 + [wire.LAST]
    body = reply["output"].encode() + b"".join(f.body for f in frames)
    whole = httpx.post(decode.http_url + "/generate_stream", json=doc, timeout=60).content
    assert body == whole  # what a mixed instance sends, byte for byte


def test_a_non_streaming_request_split_by_hand(
    prefill: ServerProcess, decode: ServerProcess, reader: DResultReader
) -> None:
    doc = {"text_input": "The weather today", "parameters": {"max_tokens": 10, "details": True}}
    path = "/v2/models/tiny_llama/generate"
    r = to_prefill(prefill, path, doc, pd_headers("102", decode))
    assert r.json() == {"reqId": "102", "isStream": False}  # nothing yet: it all comes from D
    (frame,) = of(reader.read_until(finished("102")), "102")
    assert frame.kind == wire.LAST
    assert (
        orjson.loads(frame.body) == httpx.post(decode.http_url + path, json=doc, timeout=60).json()
    )


def test_a_request_that_ends_at_prefill_never_reaches_decode(
    prefill: ServerProcess, decode: ServerProcess, reader: DResultReader
) -> None:
    before = status(decode)["decode"]["accepted"]
    doc = {"model": "tiny_llama", "prompt": "hi", "max_tokens": 1, "temperature": 0}
    reply = to_prefill(prefill, "/v1/completions", doc, pd_headers("103", decode)).json()
    assert (reply["isStream"], reply["isLastResp"]) == (False, True)
    assert orjson.loads(reply["output"])["usage"]["completion_tokens"] == 1
    assert status(decode)["decode"]["accepted"] == before


def test_interleaved_requests_are_told_apart(
    prefill: ServerProcess, decode: ServerProcess, reader: DResultReader
) -> None:
    """Four requests decode while a long one decodes on the same instance; it goes on until it
    is cancelled, so its frames come before and after theirs on the one /dresult stream,
    however the processes are scheduled. Each request is reassembled by its id alone."""
    long_id, ids = "299", [str(200 + i) for i in range(4)]
    prompts = ["The quick brown", "Once upon a time", "你好", "hi"]
    long_doc = {"model": "tiny_llama", "prompt": "In the café on the corner", "stream": True}
    long_doc |= {"max_tokens": LONG, "ignore_eos": True, "temperature": 0, "logprobs": 0}
    replies: dict[str, httpx.Response] = {}

    def send(req_id: str, prompt: str) -> None:
        doc = {"inputs": prompt, "stream": True, "parameters": {"max_new_tokens": 40}}
        replies[req_id] = to_prefill(prefill, "/infer", doc, pd_headers(req_id, decode))

    long_reply = to_prefill(prefill, "/v1/completions", long_doc, pd_headers(long_id, decode))
    assert long_reply.status_code == 200, long_reply.text
    try:
        reader.read_until(lambda fs: bool(of(fs, long_id)))  # it is decoding on D now
        threads = [
            threading.Thread(target=send, args=job) for job in zip(ids, prompts, strict=True)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [replies[i].status_code for i in ids] == [200] * len(ids)
        frames = reader.read_until(lambda fs: all(finished(i)(fs) for i in ids))
        theirs = len(frames)
        frames = reader.read_until(
            lambda fs: bool(of(fs[theirs:], long_id)) or finished(long_id)(fs)
        )
    finally:
        url = f"{decode.http_url}/v1/pd/decode/{long_id}"
        httpx.delete(url, headers={wire.JOB_KEY: KEY}, timeout=10)
        eventually(lambda: status(decode)["decode"]["jobs"] == 0)
    at = {i: [n for n, f in enumerate(frames) if f.req_id == i] for i in [long_id, *ids]}
    for req_id in ids:  # the long one's frames on both sides of each one's
        assert at[long_id][0] < at[req_id][0] <= at[req_id][-1] < at[long_id][-1], req_id
    for req_id, prompt in zip(ids, prompts, strict=True):
        output = replies[req_id].json()["output"]
        body = output.encode() + b"".join(f.body for f in of(frames, req_id))
        doc = {"inputs": prompt, "stream": True, "parameters": {"max_new_tokens": 40}}
        whole = httpx.post(decode.http_url + "/infer", json=doc, timeout=60).content
        events = [orjson.loads(e) for e in sse_events_strip(body)]
        expected = [orjson.loads(e) for e in sse_events_strip(whole)]
        untimed = [{k: v for k, v in e.items() if not k.endswith("_time")} for e in events]
        assert untimed == [
            {k: v for k, v in e.items() if not k.endswith("_time")} for e in expected
        ]
    # the long one, cut short: what it sent is the start of what it would have sent alone
    body = long_reply.json()["output"].encode() + b"".join(f.body for f in of(frames, long_id))
    chunks = [orjson.loads(e)["choices"][0] for e in sse_events_strip(body) if e != b"[DONE]"]
    tokens = [t for c in chunks for t in c["logprobs"]["tokens"]]
    alone_doc = {**long_doc, "stream": False, "max_tokens": len(tokens)}
    alone = httpx.post(decode.http_url + "/v1/completions", json=alone_doc, timeout=60).json()
    assert alone["choices"][0]["logprobs"]["tokens"] == tokens
    assert alone["choices"][0]["text"].startswith("".join(c["text"] for c in chunks))


def sse_events_strip(body: bytes) -> list[bytes]:
    return [e.removeprefix(b"data: ") for e in body.split(b"\n\n") if e]


def test_a_second_reader_is_refused_and_the_first_keeps_the_stream(
    prefill: ServerProcess, decode: ServerProcess, reader: DResultReader
) -> None:
    """MindIE's D lets a new reader take the stream over; ours keeps the first one: a second
    GET /dresult is a 409, and the first one's requests and heartbeats go on."""
    second = httpx.get(decode.http_url + "/dresult", timeout=10)
    assert second.status_code == 409
    assert "another reader is connected" in second.json()["error"]
    doc = {"inputs": "Once upon a time", "parameters": {"max_new_tokens": 6}}
    r = to_prefill(prefill, "/generate_stream", doc, pd_headers("107", decode))
    assert r.status_code == 200, r.text
    frames = reader.read_until(finished("107"))
    assert [f.kind for f in of(frames, "107")] == [wire.DATA] * 4 + [wire.LAST]
    assert wire.CLOSE not in [f.kind for f in frames]
    beats = reader.read_until(lambda fs: sum(f.kind == wire.KA for f in fs) >= 2)
    assert not reader.ended
    assert sum(f.kind == wire.KA for f in beats) >= 2
    assert status(decode)["decode"]["dresultRefused"] >= 1


def test_the_flex_shortcut_serves_the_request_whole(prefill: ServerProcess) -> None:
    r = to_prefill(prefill, "/generate", BODY, pd_headers("104", prefill))
    assert r.status_code == 200
    assert set(r.json()) == {"generated_text"}  # the family's own reply, not a PD reply


def test_a_decode_instance_nobody_reads_refuses_and_p_says_so(
    prefill: ServerProcess, decode: ServerProcess
) -> None:
    eventually(lambda: not status(decode)["decode"]["dresultConnected"])
    r = to_prefill(prefill, "/generate", BODY, pd_headers("105", decode))
    assert r.status_code == 503
    assert r.headers["x-pd-failed"] == "decode"
    assert "refused the request (503)" in r.json()["error"]
    assert "no scheduler is reading /dresult" in r.json()["error"]
    assert status(prefill)["prefill"]["leases"] == 0  # its cache was let go at once
    host = "127.0.0.1"
    r = to_prefill(
        prefill, "/generate", BODY, {**pd_headers("106", decode), "d-target": f"{host};1"}
    )
    assert r.status_code == 503
    assert "cannot be reached" in r.json()["error"]
