"""``POST /v1/pd/decode``'s body (pd/decode.py): what a prefill instance sends is read back
exactly, and every malformed body is a 400 naming the field that is missing or wrong."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import GenerateDelta
from rosettaserve.pd.decode import parse_decode_params
from rosettaserve.pd.http_client import Address

LIMIT = 1 << 20
GOOD: dict[str, Any] = {  # as PrefillRole._decode_params writes it
    "reqId": "1f2e",
    "jobKey": "Kq3-_x" * 4,
    "pNodeAddr": "127.0.0.1;8001",
    "path": "/generate",
    "body": '{"inputs": "hi"}',
    "promptIds": [1, 450],
    "deltas": [{"text": " the", "ids": [278], "special": [False], "logprobs": None}],
    "seed": 7,
    "samplerState": base64.b64encode(b"\x01\x02").decode(),
    "kvTokens": 2,
    "kvBytes": 4096,
    "identity": None,
}


def parse(doc: Any) -> Any:
    return parse_decode_params(orjson.dumps(doc), LIMIT)


def test_what_a_prefill_instance_sends_is_read_back() -> None:
    p = parse(GOOD)
    assert (p.req_id, p.job_key, p.p_addr, p.path, p.body) == (
        "1f2e",
        "Kq3-_x" * 4,
        Address("127.0.0.1", 8001),
        "/generate",
        b'{"inputs": "hi"}',
    )
    assert (p.prompt_ids, p.seed, p.sampler_state, p.kv_tokens, p.kv_bytes) == (
        [1, 450],
        7,
        b"\x01\x02",
        2,
        4096,
    )
    assert p.deltas == [GenerateDelta(0, " the", [278], [False], None)]
    assert p.identity == {}
    assert p.priority == 0  # (absent: a prefill instance from before priorities)
    assert parse({**GOOD, "priority": -5}).priority == -5
    assert parse({**GOOD, "samplerState": None, "reqId": 12}).sampler_state is None


def test_an_empty_object_names_every_missing_field() -> None:
    with pytest.raises(InvalidInput) as err:
        parse({})
    assert err.value.message == (
        "malformed decode parameters: 'reqId', 'jobKey', 'pNodeAddr', 'path', 'body', "
        "'promptIds', 'deltas', 'seed', 'kvTokens', 'kvBytes' missing"
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kvBytes": None}, "'kvBytes' missing"),
        ({"reqId": "zz!"}, "'reqId' must be a string of letters and digits, got 'zz!'"),
        ({"reqId": "é1"}, "'reqId' must be a string of letters and digits"),
        ({"reqId": True}, "'reqId' must be a string of letters and digits, got True"),
        ({"jobKey": "short"}, "'jobKey' must be 16 to 128 letters, digits, '-' or '_'"),
        ({"jobKey": "k" * 129}, "'jobKey' must be 16 to 128 letters"),
        ({"jobKey": "k k" * 8}, "'jobKey' must be 16 to 128 letters"),
        ({"jobKey": 12345678901234567}, "'jobKey' must be 16 to 128 letters"),
        ({"pNodeAddr": "127.0.0.1"}, "'pNodeAddr' must be '<host>;<port>', got '127.0.0.1'"),
        ({"pNodeAddr": "h;x"}, "'pNodeAddr' must be '<host>;<port>'"),
        ({"pNodeAddr": "h;70000"}, "'pNodeAddr' must be '<host>;<port>'"),
        ({"pNodeAddr": 5}, "'pNodeAddr' must be '<host>;<port>', got 5"),
        ({"path": 3}, "'path' must be a string, got 3"),
        ({"body": ["x"]}, "'body' must be a string"),
        ({"promptIds": []}, "'promptIds' must not be empty"),
        ({"promptIds": [1, -2]}, "'promptIds' must be a list of token ids"),
        ({"deltas": []}, "'deltas' must be a non-empty list"),
        ({"deltas": {"text": ""}}, "'deltas' must be a non-empty list"),
        ({"deltas": [{"text": "", "ids": [1]}]}, "'deltas[0]': a delta needs 'special'"),
        ({"seed": "7"}, "'seed' must be an integer, got '7'"),
        ({"seed": -1}, "'seed' must be in [0, 18446744073709551615]"),
        ({"kvTokens": 1.5}, "'kvTokens' must be an integer"),
        ({"kvBytes": -1}, "'kvBytes' must be >= 0"),  # 0: no cache, recomputed (vllm)
        ({"kvBytes": LIMIT + 1}, f"'kvBytes' must be in [0, {LIMIT}] (--max-kv-bytes)"),
        ({"samplerState": "!!"}, "'samplerState' must be base64"),
        ({"samplerState": 5}, "'samplerState' must be a string"),
        ({"identity": [1]}, "'identity' must be an object"),
        ({"priority": 2**31}, "'priority' must be in [-2147483648, 2147483647]"),
        ({"priority": "1"}, "'priority' must be an integer"),
    ],
)
def test_a_malformed_field_is_named(change: dict[str, Any], message: str) -> None:
    doc = {k: v for k, v in {**GOOD, **change}.items() if v is not None or k not in change}
    with pytest.raises(InvalidInput) as err:
        parse(doc)
    assert err.value.message.startswith("malformed decode parameters: ")
    assert message in err.value.message
    assert "KeyError" not in err.value.message


@pytest.mark.parametrize("body", [b"", b"[1]", b"{", b'"x"'])
def test_a_body_that_is_not_an_object(body: bytes) -> None:
    with pytest.raises(InvalidInput, match="JSON"):
        parse_decode_params(body, LIMIT)
