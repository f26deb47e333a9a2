"""A sequence's KV cache on the wire (the prefill instance holds it under a lease: leases.py).

Payload: ``RSKV`` + version byte + 4-byte little-endian header length + a JSON header + the raw
tensor bytes (keys then values of layer 0, then of layer 1, ...; C order, little-endian). The
header names the dtype, the per-tensor shape and byte count, the token count and the model's
fingerprint; the reader checks every one of them against its own model and the size limit
before it reads a byte of tensor data. Nothing is ever unpickled: the bytes become tensors
through ``torch.frombuffer``.
"""

from __future__ import annotations

import struct
import sys
from typing import Any

import orjson
import torch

from rosettaserve.core.pd_engine import KV, Geometry
from rosettaserve.runtimes.llm.kv_port import fingerprint, geometry

__all__ = ["Geometry", "KvError", "decode", "encode", "fingerprint", "geometry", "read_header"]

MAGIC = b"RSKV\x01"
_HEAD = struct.Struct("<I")
MAX_HEADER = 64 * 1024
DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}
_NAMES = {v: k for k, v in DTYPES.items()}


class KvError(ValueError):
    """A KV payload that does not fit this model, or is malformed."""


def encode(kv: KV, req_id: str, geo: Geometry) -> bytes:
    tokens = int(kv[0][0].shape[2])
    tensors = [t for pair in kv for t in pair]
    raw = [_raw(t) for t in tensors]
    header = {
        "req_id": req_id,
        "fingerprint": geo.fingerprint,
        "dtype": _NAMES[tensors[0].dtype],
        "layers": len(kv),
        "shape": list(tensors[0].shape),
        "tokens": tokens,
        "nbytes": sum(len(r) for r in raw),
    }
    head = orjson.dumps(header)
    return b"".join([MAGIC, _HEAD.pack(len(head)), head, *raw])


def _raw(t: torch.Tensor) -> bytes:
    t = t.detach().to("cpu").contiguous()
    if sys.byteorder != "little":  # pragma: no cover - every platform we run on
        raise KvError("KV transfer is written for little-endian machines")
    return t.view(torch.uint8).numpy().tobytes()


def read_header(
    payload: bytes, geo: Geometry, tokens: int, limit: int
) -> tuple[int, dict[str, Any]]:
    """Check the header against the reader's model before reading any tensor: (offset, header)."""
    if len(payload) < len(MAGIC) + 4 or not payload.startswith(MAGIC):
        raise KvError("not a KV payload (bad magic)")
    (size,) = _HEAD.unpack_from(payload, len(MAGIC))
    start = len(MAGIC) + 4
    if size > MAX_HEADER or start + size > len(payload):
        raise KvError("the KV payload header is too large or truncated")
    header = orjson.loads(payload[start : start + size])
    expected = {
        "fingerprint": geo.fingerprint,
        "dtype": geo.dtype,
        "layers": geo.layers,
        "shape": [1, geo.kv_heads, tokens, geo.head_dim],
        "tokens": tokens,
        "nbytes": geo.nbytes(tokens),
    }
    wrong = [k for k, v in expected.items() if not isinstance(header, dict) or header.get(k) != v]
    if wrong:
        got = {k: header.get(k) for k in wrong} if isinstance(header, dict) else header
        raise KvError(f"the KV payload does not fit this model: {wrong} = {got}")
    if geo.nbytes(tokens) > limit:
        raise KvError(f"the KV cache is {geo.nbytes(tokens)} bytes, over the limit of {limit}")
    if len(payload) != start + size + geo.nbytes(tokens):
        raise KvError("the KV payload's length does not match its header")
    return start + size, header


def decode(payload: bytes, geo: Geometry, tokens: int, limit: int) -> KV:
    offset, header = read_header(payload, geo, tokens, limit)
    dtype, shape = DTYPES[geo.dtype], tuple(header["shape"])
    per = geo.nbytes(tokens) // (2 * geo.layers)
    buffer = bytearray(memoryview(payload)[offset:])
    tensors = [
        torch.frombuffer(buffer, dtype=torch.uint8, count=per, offset=i * per)
        .view(dtype)
        .view(shape)
        for i in range(2 * geo.layers)
    ]
    return [(tensors[2 * i], tensors[2 * i + 1]) for i in range(geo.layers)]
