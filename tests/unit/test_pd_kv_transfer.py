"""KV caches on the wire: exact round trip, every header field checked against the reader's
model before any tensor is read, and size bounds (the leases: test_pd_leases.py)."""

from __future__ import annotations

import dataclasses

import orjson
import pytest
import torch

from rosettaserve.pd import kv_transfer
from rosettaserve.pd.kv_transfer import Geometry, KvError, decode, encode, read_header

GEO = Geometry(layers=2, kv_heads=2, head_dim=4, dtype="float32", fingerprint="abc")
LIMIT = 1 << 20


def cache(tokens: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> list:  # type: ignore[type-arg]
    g = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randn(1, 2, tokens, 4, generator=g).to(dtype),
            torch.randn(1, 2, tokens, 4, generator=g).to(dtype),
        )
        for _ in range(2)
    ]


def test_a_cache_round_trips_bit_for_bit() -> None:
    kv = cache(7)
    payload = encode(kv, "42", GEO)
    assert len(payload) > GEO.nbytes(7)
    back = decode(payload, GEO, tokens=7, limit=LIMIT)
    assert len(back) == 2
    for (k, v), (k2, v2) in zip(kv, back, strict=True):
        assert torch.equal(k, k2)
        assert torch.equal(v, v2)
        assert k2.shape == (1, 2, 7, 4)


def test_a_view_into_a_larger_cache_is_sent_as_its_own_values() -> None:
    big = cache(10)
    sliced = [(k[:, :, -6:], v[:, :, -6:]) for k, v in big]  # what a batch row would ship
    back = decode(encode(sliced, "1", GEO), GEO, tokens=6, limit=LIMIT)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(sliced, back, strict=True))


def test_bfloat16_travels_as_raw_bytes() -> None:
    geo = dataclasses.replace(GEO, dtype="bfloat16")
    kv = cache(3, torch.bfloat16)
    back = decode(encode(kv, "1", geo), geo, tokens=3, limit=LIMIT)
    assert back[1][1].dtype == torch.bfloat16
    assert torch.equal(back[1][1], kv[1][1])


def header_of(payload: bytes) -> tuple[int, dict[str, object]]:
    start = len(kv_transfer.MAGIC) + 4
    size = int.from_bytes(payload[len(kv_transfer.MAGIC) : start], "little")
    return start + size, orjson.loads(payload[start : start + size])


def with_header(payload: bytes, **change: object) -> bytes:
    end, header = header_of(payload)
    head = orjson.dumps({**header, **change})
    return kv_transfer.MAGIC + len(head).to_bytes(4, "little") + head + payload[end:]


@pytest.mark.parametrize(
    ("geo", "tokens", "message"),
    [
        (dataclasses.replace(GEO, fingerprint="other"), 5, "fingerprint"),
        (dataclasses.replace(GEO, dtype="float16"), 5, "dtype"),
        (dataclasses.replace(GEO, layers=3), 5, "layers"),
        (dataclasses.replace(GEO, kv_heads=1), 5, "shape"),
        (dataclasses.replace(GEO, head_dim=8), 5, "shape"),
        (GEO, 6, "tokens"),
    ],
)
def test_a_cache_for_another_model_or_length_is_refused(
    geo: Geometry, tokens: int, message: str
) -> None:
    with pytest.raises(KvError, match=message):
        decode(encode(cache(5), "1", GEO), geo, tokens=tokens, limit=LIMIT)


def test_malformed_payloads_are_refused_before_any_tensor() -> None:
    payload = encode(cache(5), "1", GEO)
    with pytest.raises(KvError, match="magic"):
        decode(b"PK\x03\x04" + payload[4:], GEO, 5, LIMIT)  # e.g. a zip (torch.save) file
    with pytest.raises(KvError, match="length"):
        decode(payload[:-1], GEO, 5, LIMIT)
    with pytest.raises(KvError, match="length"):
        decode(payload + b"\0", GEO, 5, LIMIT)
    with pytest.raises(KvError, match="nbytes"):
        decode(with_header(payload, nbytes=10), GEO, 5, LIMIT)
    with pytest.raises(KvError, match="too large or truncated"):
        decode(payload[: len(kv_transfer.MAGIC) + 6], GEO, 5, LIMIT)
    with pytest.raises(KvError, match="over the limit"):
        read_header(payload, GEO, 5, limit=GEO.nbytes(5) - 1)


def test_the_geometry_of_the_example_model() -> None:
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    folder = Path(__file__).resolve().parents[2] / "examples" / "models" / "tiny_llama"
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    geo = kv_transfer.geometry(model)
    assert (geo.layers, geo.kv_heads, geo.head_dim, geo.dtype) == (2, 2, 16, "float32")
    assert geo.fingerprint == kv_transfer.geometry(model).fingerprint
    with torch.no_grad():
        next(model.parameters()).add_(1.0)  # other weights, same config
    assert kv_transfer.fingerprint(model) != geo.fingerprint
