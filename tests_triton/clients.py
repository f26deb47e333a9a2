"""tritonclient over REST or gRPC, the same calls for both: inputs and outputs as numpy arrays
by name, statistics as counts."""

from __future__ import annotations

from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import np_to_triton_dtype

from tests_triton.servers import Peer

PROTOCOLS = ("http", "grpc")


def client(server: Peer, protocol: str) -> Any:
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http)
    return grpcclient.InferenceServerClient(server.grpc)


def infer(
    server: Peer,
    protocol: str,
    model: str,
    inputs: dict[str, np.ndarray],
    outputs: list[str],
    *,
    binary: bool = True,
) -> dict[str, np.ndarray]:
    """``outputs`` of ``model`` for ``inputs``; ``binary=False``: tensors as JSON (REST)."""
    module: Any = httpclient if protocol == "http" else grpcclient
    given = []
    for name, value in inputs.items():
        tensor = module.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
        if protocol == "http":
            tensor.set_data_from_numpy(value, binary_data=binary)
        else:
            tensor.set_data_from_numpy(value)
        given.append(tensor)
    asked = [
        module.InferRequestedOutput(name, binary_data=binary)
        if protocol == "http"
        else module.InferRequestedOutput(name)
        for name in outputs
    ]
    with client(server, protocol) as c:
        result = c.infer(model, given, outputs=asked)
    return {name: result.as_numpy(name) for name in outputs}


def stats(server: Peer, model: str) -> dict[str, Any]:
    """The statistics extension's entry of ``model``'s version 1 (REST)."""
    with httpclient.InferenceServerClient(server.http) as c:
        entry: dict[str, Any] = c.get_inference_statistics(model)["model_stats"][0]
    return entry


def count(server: Peer, model: str) -> int:
    """Successful inferences of ``model`` so far."""
    return int(stats(server, model)["inference_stats"]["success"]["count"])
