"""tritonclient over REST or gRPC, the same calls for both: inputs and outputs as numpy arrays
by name, statistics as counts."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from tests.serverproc import wait_for
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


def count(server: Peer, model: str, kind: str = "success") -> int:
    """Inferences of ``model`` so far (``kind``: success, fail, queue, compute_infer...)."""
    return int(stats(server, model)["inference_stats"][kind]["count"])


def counted(
    server: Peer, before: dict[str, int], added: int, kind: str = "success"
) -> dict[str, int]:
    """What each model of ``before`` counted since, once each has ``added`` more (or a while
    passed): Triton records a model's statistics after its answer has gone, so a count read
    right after the answer may not include it yet. More than ``added`` shows too."""

    def since() -> dict[str, int]:
        return {model: count(server, model, kind) - n for model, n in before.items()}

    with contextlib.suppress(AssertionError):
        wait_for(lambda: all(n >= added for n in since().values()), timeout=10)
    return since()


def status_of(protocol: str, http: int) -> str:
    """tritonclient's status of an error: the HTTP code, or the gRPC code it maps to."""
    if protocol == "http":
        return str(http)
    names = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 409: "ALREADY_EXISTS", 500: "INTERNAL"}
    names[501] = "UNIMPLEMENTED"
    return f"StatusCode.{names[http]}"


def refused(call: Callable[[], object]) -> InferenceServerException:
    """The error ``call()`` fails with."""
    with pytest.raises(InferenceServerException) as caught:
        call()
    return caught.value
