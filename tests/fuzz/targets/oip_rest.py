"""The Open Inference Protocol's REST request body (``protocols/oip/convert.py``): JSON, with
the binary tensor data extension's tail, read into the request's tensors.

The input is the body; one that starts with ``#`` carries the Inference-Header-Content-Length
header's value first (``#<value>\\n<body>``). Properties: only the project's errors (4xx)
escape; read on the event loop (``inline``: BYTES counts bounded, LargeWork past the loop's
budget) the body means what it means read off it; and the bulk reader of large numeric arrays
(``core/json_bulk.py``) and the ordinary one agree: the same body with its ``"data"`` keys
spelt ``"d\\u0061ta"`` (the same JSON, which the bulk reader does not look for) gives the same
tensors, bit for bit, or the same refusal. With the header ``0`` the body is a raw binary request
(``protocols/oip/raw_request.py``), read for models of several signatures: accepted, its one
tensor holds the body's bytes exactly. A system shared-memory region named ``fuzz`` (64
bytes) is registered, so that the offsets and sizes a body names are checked against a real one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.executor import LargeWork
from rosettaserve.core.registry import ModelVersion
from rosettaserve.core.types import TensorSpec
from rosettaserve.protocols.oip import convert, shared_memory
from rosettaserve.protocols.oip.raw_request import is_raw, raw_request
from tests.fuzz.targets.refusals import assert_a_refusal

REGION = "fuzz"  # what the seeds name (tests/fuzz/make_corpus.py)
REGION_BYTES = 64


def register_region() -> None:
    """The region, registered once; its object's name is unlinked at once (the registry holds
    the object open), so a fuzz run leaves nothing in /dev/shm."""
    if shared_memory.REGIONS.status():
        return
    path = Path(shared_memory.SHM_DIR) / f"rs_fuzz_oip_{os.getpid()}"
    path.write_bytes(bytes(range(REGION_BYTES)))
    try:
        shared_memory.REGIONS.register(REGION, "/" + path.name, 0, REGION_BYTES)
    finally:
        path.unlink()


register_region()


def split(data: bytes) -> tuple[str | None, bytes]:
    if not data.startswith(b"#"):
        return None, data
    header, _, body = data[1:].partition(b"\n")
    return header.decode("latin-1"), body


def read(body: bytes, header: str | None, inline: bool = False) -> tuple[str, Any]:
    try:
        request = convert.parse_infer(body, header, "m", "", inline)
    except LargeWork:
        assert inline, "LargeWork off the event loop"
        return "larger than the budget", None
    except InvalidInput:
        return "refused", None
    except Exception as exc:
        assert_a_refusal(exc)
        return "refused", None
    inputs = [
        (t.name, t.datatype, tuple(t.shape), t.data.dtype.str, _content(t.data))
        for t in request.inputs
    ]
    outputs = [(o.name, o.parameters) for o in request.outputs or []]
    return "request", (inputs, outputs, request.parameters, request.id)


def _content(array: Any) -> Any:
    if array.dtype == object:
        return [bytes(v) for v in array.ravel()]
    return array.tobytes()


SIGNATURES = [  # (max_batch_size, the one input's datatype and shape)
    (4, "FP32", (-1, 3)),
    (0, "INT16", (-1,)),
    (0, "UINT8", (2, -1)),
    (8, "BYTES", (-1, 1)),
    (0, "BOOL", (-1, -1)),
]


def check_raw(body: bytes) -> None:
    for batch, datatype, shape in SIGNATURES:
        spec = TensorSpec("X", datatype, shape)
        mv = ModelVersion(name="m", version="1", runtime="python", inputs=[spec], outputs=[spec])
        mv.max_batch_size = batch
        try:
            (tensor,) = raw_request(body, mv).inputs
        except InvalidInput:
            continue
        except Exception as exc:
            assert_a_refusal(exc)
            continue
        content = _content(tensor.data)
        assert (content == [body]) if datatype == "BYTES" else (content == body), datatype


def check(data: bytes) -> None:
    header, body = split(data)
    if is_raw(header):
        check_raw(body)
        return
    got = read(body, header)
    inline = read(body, header, inline=True)
    assert inline[0] == "larger than the budget" or inline == got, (inline, got)
    plain = body.replace(b'"data"', b'"d\\u0061ta"')
    if plain != body and header is None:
        assert read(plain, header) == got, "the bulk reader and the ordinary one disagree"
