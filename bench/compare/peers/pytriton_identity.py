"""PyTriton 0.7 identity models: Triton Inference Server's own C++ server (the ``tritonserver``
binary the wheel bundles, Python backend) serving OUTPUT0 = INPUT0.

Run: python pytriton_identity.py HTTP_PORT GRPC_PORT [--batching]

Two models: ``identity`` (FP32) and ``identity_bytes`` (BYTES: Triton checks an input's datatype
against the model's configuration, so one model cannot take both). Triton speaks OIP (KServe V2)
REST, its binary tensor data extension and gRPC itself; the Python callable only returns its
input. Without ``--batching`` the models have no batch dimension (``max_batch_size`` 0, shape
[-1, -1]) and the callable answers each request of a call on its own. With ``--batching``
Triton's dynamic batcher is on (``max_batch_size`` 64, ``max_queue_delay_microseconds`` 0: it
batches what is queued, it does not wait for more) and the callable is wrapped in pytriton's
``@batch``, which stacks the requests of a call into one array and splits the answer, as a
batching model is written with PyTriton.

SIGTERM stops Triton and the proxy (pytriton's serve loop stops on KeyboardInterrupt).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

import numpy as np
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

MAX_BATCH_SIZE = 64  # the [64, 1024] case is one request of 64 rows


def identity(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"OUTPUT0": request["INPUT0"]} for request in requests]


@batch
def identity_batched(INPUT0: np.ndarray) -> dict[str, np.ndarray]:  # @batch passes inputs by name
    return {"OUTPUT0": INPUT0}


def interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def use_this_libpython() -> None:
    """Triton's Python backend stub links ``libpython3.X.so.1.0`` and runs with this venv's
    standard library: the loader must find the library of this interpreter, not the system's
    (Debian's 3.11.2 with pyenv's 3.11.7 standard library fails in multiprocessing)."""
    lib = Path(sys.base_prefix) / "lib"
    if (lib / f"libpython{sys.version_info.major}.{sys.version_info.minor}.so.1.0").exists():
        found = os.environ.get("LD_LIBRARY_PATH")
        os.environ["LD_LIBRARY_PATH"] = f"{lib}:{found}" if found else str(lib)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("http_port", type=int)
    parser.add_argument("grpc_port", type=int)
    parser.add_argument("--batching", action="store_true", help="Triton's dynamic batcher on")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, interrupt)
    use_this_libpython()
    config = TritonConfig(
        http_address="127.0.0.1",
        http_port=args.http_port,
        grpc_address="127.0.0.1",
        grpc_port=args.grpc_port,
        allow_metrics=False,
        log_verbose=0,
    )
    if args.batching:
        model = ModelConfig(batching=True, max_batch_size=MAX_BATCH_SIZE, batcher=DynamicBatcher())
        func: Any = identity_batched
        shape: tuple[int, ...] = (-1,)  # the batch dimension is Triton's
    else:
        model = ModelConfig(batching=False)
        func = identity
        shape = (-1, -1)
    with Triton(config=config) as triton:
        for name, dtype in (("identity", np.float32), ("identity_bytes", bytes)):
            triton.bind(
                model_name=name,
                infer_func=func,
                inputs=[Tensor(name="INPUT0", dtype=dtype, shape=shape)],
                outputs=[Tensor(name="OUTPUT0", dtype=dtype, shape=shape)],
                config=model,
            )
        triton.serve()


if __name__ == "__main__":
    main()
