"""The PD wire contract: P headers, the P reply, /dresult frames (cut anywhere, interleaved),
shipped deltas, and recompute bodies for every family."""

from __future__ import annotations

import orjson
import pytest

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import GenerateDelta, TokenLogprob, TopLogprob
from rosettaserve.pd import wire
from rosettaserve.pd.recompute import parse_tokens, restore, retry_body

GOOD = {"req-id": "12345", "req-type": "prefill", "d-target": "172.17.0.9;1025"}


# -- P headers -----------------------------------------------------------------------------------


def test_prefill_headers_as_the_coordinator_sends_them() -> None:
    pd = wire.parse_prefill_headers({**GOOD, "is-recompute": "true"})
    assert (pd.req_id, pd.d_host, pd.d_port, pd.recompute) == ("12345", "172.17.0.9", 1025, True)
    plain = wire.parse_prefill_headers({**GOOD, "d-target": "10.0.0.2", "d-port": "8080"})
    assert (plain.d_addr, plain.recompute) == ("10.0.0.2:8080", False)
    sent = wire.prefill_headers("77", "127.0.0.1", 9000, recompute=False)
    assert sent == {
        "req-id": "77",
        "req-type": "prefill",
        "d-target": "127.0.0.1;9000",
        "d-port": "9000",
        "is-recompute": "false",
    }
    assert wire.parse_prefill_headers(sent).d_addr == "127.0.0.1:9000"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"req-type": None}, "'req-type' is required"),
        ({"req-id": None}, "'req-id' is required"),
        ({"d-target": None}, "'d-target' is required"),
        ({"req-id": ""}, "'req-id' is required"),
        ({"req-type": "decode"}, "must be 'prefill'"),
        ({"req-id": "12-3"}, "hex digits"),
        ({"req-id": "zz!"}, r"^header 'req-id' must be hex digits, got 'zz!'$"),
        ({"req-id": "f" * 1025}, r"^header 'req-id' is 1025 digits long; at most 1024 "),
        ({"req-id": "z" * 2000}, r"must be hex digits, got 'z{40}'\.\.\.$"),  # quoted, cut short
        ({"d-target": "d-host;80"}, "IPv4"),
        ({"d-target": "::1"}, "IPv4"),
        ({"d-target": "10.0.0.1"}, "no port"),
        ({"d-target": "10.0.0.1;0"}, r"\[1, 65535\]"),
        ({"d-target": "10.0.0.1;x"}, r"^header 'd-target': .* a number in \[1, 65535\], got 'x'"),
        ({"d-target": "10.0.0.1", "d-port": "99999"}, r"^header 'd-port': .*got '99999'"),
        ({"d-target": "10.0.0.1;80;90"}, "'<ip>' or '<ip>;<port>'"),
        ({"is-recompute": "yes"}, "true or false"),
    ],
)
def test_bad_prefill_headers_are_400_naming_the_header(
    change: dict[str, str | None], message: str
) -> None:
    headers = {**GOOD, **change}
    with pytest.raises(InvalidInput, match=message):
        wire.parse_prefill_headers({k: v for k, v in headers.items() if v is not None})


# -- the P reply ---------------------------------------------------------------------------------


def test_prefill_reply_fields_follow_mindie() -> None:
    going_on = wire.prefill_reply("9", is_stream=False, output=b"", last=False)
    assert going_on == {"reqId": "9", "isStream": False}
    first = wire.prefill_reply("9", is_stream=True, output=b"data: {}\n\n", last=False)
    assert first == {"reqId": "9", "isStream": True, "isLastResp": False, "output": "data: {}\n\n"}
    whole = wire.prefill_reply("9", is_stream=False, output=b'{"a":1}', last=True)
    assert whole["isLastResp"] is True
    assert orjson.loads(whole["output"]) == {"a": 1}
    parsed = wire.parse_prefill_reply(orjson.dumps(first))
    assert (parsed.req_id, parsed.is_stream, parsed.output, parsed.last) == (
        "9",
        True,
        b"data: {}\n\n",
        False,
    )
    assert wire.parse_prefill_reply(orjson.dumps(going_on)).last is False
    with pytest.raises(ValueError, match="reqId"):
        wire.parse_prefill_reply(b'{"isStream": true}')


# -- /dresult frames -----------------------------------------------------------------------------


def test_frames_are_byte_exact() -> None:
    assert wire.frame("1234567", wire.DATA, b"data:{xxx}") == b"reqId:1234567\0data:data:{xxx}\0"
    assert wire.frame("1", wire.LAST, b"{}") == b"reqId:1\0lastData:{}\0"
    assert wire.close_frame().startswith(b"reqId:0xffffffffffffffff\0close:")
    assert wire.KEEPALIVE == b"ka:heartbeat\0"


STREAM = [
    ("11", wire.DATA, b'data: {"token":"a"}\n\n'),
    ("22", wire.DATA, b'{"text":["x"]}\0'),  # vLLM 0.2's chunk ends with NUL
    ("11", wire.DATA, b'data: {"token":"b"}\n\n'),
    ("22", wire.LAST, b'{"text":["y"]}\0'),
    ("33", wire.ERROR, b"Pull kv failed."),
    ("11", wire.RETRY, b'{"inputs":"2,5,6,7"}'),
    ("44", wire.LAST, b'{"generated_text":"\\u0000 ok"}'),
]


def encoded() -> bytes:
    parts = [wire.frame(*f) for f in STREAM[:3]] + [wire.KEEPALIVE]
    return b"".join(parts + [wire.frame(*f) for f in STREAM[3:]] + [wire.close_frame()])


def regroup(frames: list[wire.Frame]) -> list[tuple[str, str, bytes]]:
    """Frames per request with bodies joined where a trailing NUL came as its own frame."""
    out: list[tuple[str, str, bytes]] = []
    for f in frames:
        if f.body == b"\0" and out and out[-1][0] == f.req_id:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + b"\0")
        else:
            out.append((f.req_id, f.kind, f.body))
    return out


def test_a_whole_stream_parses_to_its_frames() -> None:
    frames = wire.FrameParser().feed(encoded())
    assert [f.kind for f in frames].count(wire.KA) == 1
    got = [(f.req_id, f.kind, f.body) for f in frames if f.kind != wire.KA]
    assert got == [*STREAM, (wire.CLOSE_ID, wire.CLOSE, wire.CLOSE_TEXT.encode())]


@pytest.mark.parametrize("step", [1, 2, 3, 7, 16])
def test_frames_round_trip_however_the_stream_is_cut(step: int) -> None:
    data = encoded()
    parser = wire.FrameParser()
    frames = []
    for at in range(0, len(data), step):
        frames += parser.feed(data[at : at + step])
    assert [f.kind for f in frames].count(wire.KA) == 1
    got = [f for f in regroup(frames) if f[1] != wire.KA]
    assert got == [*STREAM, (wire.CLOSE_ID, wire.CLOSE, wire.CLOSE_TEXT.encode())]


def test_every_cut_point_of_two_frames() -> None:
    data = wire.frame("7", wire.DATA, b'{"text":["a"]}\0') + wire.frame("8", wire.LAST, b"{}")
    for cut in range(len(data) + 1):
        parser = wire.FrameParser()
        frames = parser.feed(data[:cut]) + parser.feed(data[cut:])
        assert regroup(frames) == [
            ("7", wire.DATA, b'{"text":["a"]}\0'),
            ("8", wire.LAST, b"{}"),
        ], cut


def test_unknown_frame_keywords_are_an_error() -> None:
    with pytest.raises(ValueError, match="unknown"):
        wire.FrameParser().feed(b"reqId:1\0bogus:x\0")


# -- shipped deltas ------------------------------------------------------------------------------


def test_deltas_round_trip_with_logprobs() -> None:
    lp = TokenLogprob(5, " fox", -0.25, (TopLogprob(5, " fox", -0.25), TopLogprob(9, " cat", -2.0)))
    for delta in (
        GenerateDelta(0, " fox", [5], [False], [lp]),
        GenerateDelta(0, "", [300, 301], [False, True], None),
    ):
        doc = orjson.loads(orjson.dumps(wire.delta_doc(delta)))
        assert wire.delta_from_doc(doc) == delta


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"text": 1, "ids": [1], "special": [False]},
        {"text": "", "ids": [-1], "special": [False]},
        {"text": "", "ids": [1, 2], "special": [False]},
        {"text": "", "ids": [1], "special": [False], "logprobs": [[1, "a"]]},
    ],
)
def test_malformed_deltas_are_refused(doc: object) -> None:
    with pytest.raises(ValueError, match=r"delta|list|logprob"):
        wire.delta_from_doc(doc)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"ids": [1], "special": [False]}, "a delta needs 'text'"),
        ({"text": "", "special": [False]}, "a delta needs 'ids'"),
        ({"text": "", "ids": [1]}, "a delta needs 'special'"),
        ({"text": None, "ids": [1], "special": [False]}, "'text' must be a string"),
        ({"text": "", "ids": [-1], "special": [False]}, "'ids' must be a list of token ids"),
        ({"text": "", "ids": [1], "special": [1]}, "'special' must hold one boolean per token"),
    ],
)
def test_malformed_deltas_name_the_field(doc: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        wire.delta_from_doc(doc)


# -- recompute bodies ----------------------------------------------------------------------------

BODIES = [
    ("/generate", {"inputs": "The quick", "parameters": {"max_new_tokens": 9}}, "inputs"),
    ("/generate", {"prompt": "The quick", "max_tokens": 9}, "prompt"),
    ("/generate_stream", {"inputs": "The quick"}, "inputs"),
    ("/", {"inputs": "The quick", "stream": True}, "inputs"),
    ("/v1/completions", {"model": "m", "prompt": "The quick"}, "prompt"),
    ("/v2/models/m/generate_stream", {"text_input": "The quick"}, "text_input"),
    ("/infer", {"inputs": "The quick", "stream": True}, "inputs"),
    ("/infer_token", {"input_id": [1, 2, 3]}, "inputs"),
    ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "x"}]}, ""),
]


@pytest.mark.parametrize(("path", "doc", "field"), BODIES)
def test_a_recompute_body_carries_the_tokens_and_restores_the_original(
    path: str, doc: dict[str, object], field: str
) -> None:
    body = retry_body(path, orjson.dumps(doc), [1, 2, 3], [40, 41], sampler=(7, b"\x01\x02"))
    sent = orjson.loads(body)
    if field:
        assert sent[field] == "3,1,2,3,40,41"
    else:
        assert sent["messages"] == [{"role": "user", "content": "3,1,2,3,40,41"}]
    assert "origin_inputs" in sent
    original, state = restore(path, body)
    assert orjson.loads(original) == doc
    assert (state.prompt_ids, state.prior) == ([1, 2, 3], [40, 41])
    assert (state.seed, state.sampler_state) == (7, b"\x01\x02")


def test_a_recompute_body_from_elsewhere_without_origin_still_parses() -> None:
    _, state = restore("/generate", b'{"inputs": "2,10,11,12", "parameters": {}}')
    assert (state.prompt_ids, state.prior, state.seed) == ([10, 11], [12], None)


@pytest.mark.parametrize("text", ["", "0,1,2", "3,1,2", "a,b", "2,-1,4", None])
def test_bad_recompute_token_strings_are_400(text: str | None) -> None:
    with pytest.raises(InvalidInput):
        parse_tokens(text)
