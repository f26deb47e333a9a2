"""The request bodies: one input tensor per case (random FP32 with a fixed seed; for the BYTES
case, random strings of letters), encoded per server as OIP REST JSON, REST with the binary
tensor data extension, or a gRPC ModelInfer frame.
A ``Body`` is one such request written to a file, with (for REST) the wrk lua script sending it.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from spec import (
    GRPC_CASES,
    GRPC_RAW_1MIB,
    REST_BINARY_1MIB,
    REST_BYTES,
    REST_JSON_64X1024,
    SMALL_CASES,
    ServerSpec,
)

SMALL_SHAPE, LARGE_SHAPE, MEDIUM_SHAPE, BYTES_SHAPE = (1, 4), (1, 262144), (64, 1024), (1, 128)
BYTES_LENGTHS = (1, 32)  # each string of the BYTES case: this many letters, at random
SEEDS = {SMALL_SHAPE: 20260801, LARGE_SHAPE: 20260802, MEDIUM_SHAPE: 20260803}


@dataclass
class Body:
    """A request of one case for one server: the bytes the load generator sends, and its input."""

    path: Path  # body file (REST) or gRPC frame file
    data: bytes
    tensor: np.ndarray[Any, Any]  # FP32, or an object array of str for the BYTES case
    headers: dict[str, str]
    script: Path | None = None  # wrk lua script (REST)
    model: str = "identity"  # the model it is sent to (/v2/models/{model}/infer)


def strings(shape: tuple[int, ...], seed: int = 20260804) -> np.ndarray[Any, Any]:
    """Random ASCII letters, BYTES_LENGTHS long each: an object array of str."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"))
    low, high = BYTES_LENGTHS
    lengths = rng.integers(low, high + 1, int(np.prod(shape)))
    words = ["".join(rng.choice(letters, int(n))) for n in lengths]
    return np.array(words, dtype=object).reshape(shape)


def tensor_for(case: str) -> np.ndarray[Any, Any]:
    if case == REST_BYTES:
        return strings(BYTES_SHAPE)
    if case in SMALL_CASES:
        shape = SMALL_SHAPE
    else:
        shape = MEDIUM_SHAPE if case == REST_JSON_64X1024 else LARGE_SHAPE
    return np.random.default_rng(SEEDS[shape]).standard_normal(shape).astype(np.float32)


def json_body(spec: ServerSpec, tensor: np.ndarray[Any, Any]) -> bytes:
    if tensor.dtype == object:
        data = ",".join(json.dumps(v) for v in tensor.reshape(-1))
        datatype = "BYTES"
    else:  # str(np.float32) is numpy's shortest repr that reads back to the same float32
        data = ",".join(str(v) for v in tensor.reshape(-1))
        datatype = "FP32"
    head = {"name": spec.input_name, "shape": list(tensor.shape), "datatype": datatype}
    return f'{{"inputs":[{json.dumps(head)[:-1]},"data":[{data}]}}]}}'.encode()


def binary_body(spec: ServerSpec, tensor: np.ndarray[Any, np.dtype[np.float32]]) -> bytes:
    raw = tensor.astype("<f4").tobytes()
    head = {
        "inputs": [
            {
                "name": spec.input_name,
                "shape": list(tensor.shape),
                "datatype": "FP32",
                "parameters": {"binary_data_size": len(raw)},
            }
        ],
        "parameters": {"binary_data_output": True},
    }
    return json.dumps(head, separators=(",", ":")).encode() + raw


def grpc_message(
    spec: ServerSpec, model: str, tensor: np.ndarray[Any, np.dtype[np.float32]], raw: bool
) -> bytes:
    from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb

    request = pb.ModelInferRequest(model_name=model)
    item = request.inputs.add(name=spec.input_name, datatype="FP32", shape=list(tensor.shape))
    if raw:
        request.raw_input_contents.append(tensor.astype("<f4").tobytes())
    else:
        item.contents.fp32_contents.extend(tensor.reshape(-1).tolist())
    return bytes(request.SerializeToString())


def make_body(spec: ServerSpec, case: str, workdir: Path) -> Body:
    tensor = tensor_for(case)
    model = spec.model_for(case)
    path = workdir / f"body-{spec.key}-{case}.bin"
    if case in GRPC_CASES:
        message = grpc_message(spec, model, tensor, raw=case == GRPC_RAW_1MIB)
        frame = b"\x00" + struct.pack(">I", len(message)) + message
        path.write_bytes(frame)
        headers = {"content-type": "application/grpc", "te": "trailers"}
        return Body(path, message, tensor, headers, model=model)
    if case == REST_BINARY_1MIB:
        data = binary_body(spec, tensor)
        headers = {
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(data) - tensor.nbytes),
        }
    else:
        data = json_body(spec, tensor)
        headers = {"Content-Type": "application/json"}
    path.write_bytes(data)
    script = path.with_suffix(".lua")
    write_lua(script, path, headers)
    return Body(path, data, tensor, headers, script, model)


def write_lua(script: Path, body: Path, headers: dict[str, str]) -> None:
    lines = [
        f'local f = assert(io.open("{body}", "rb"))',
        'wrk.body = f:read("*a")',
        "f:close()",
        'wrk.method = "POST"',
    ]
    lines += [f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()]
    script.write_text("\n".join(lines) + "\n")
