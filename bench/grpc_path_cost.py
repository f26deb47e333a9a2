"""The server's own cost of one OIP gRPC ModelInfer call, in-process (no sockets, no grpc core).

    taskset -c 0 .venv/bin/python bench/grpc_path_cost.py REPO [--requests 20000] [--rounds 7]
        [--model identity] [--raw]

Loads REPO (by default one with a python identity model named ``identity``, as
``identity_repo`` in bench/compare/rosetta.py writes it) and runs, per call, what the server
runs around grpc core for ``ModelInfer``: the request's deserializer and the response's
serializer as the server registers them (none: the servicer reads and writes the bytes itself),
and the servicer method in its error-mapping wrapper. The request is bench/compare's
gRPC small case (FP32 [1,4] in ``fp32_contents``; with --raw, in ``raw_input_contents``).
Prints the best round's microseconds per call.

As with bench/rest_path_cost.py, instruction counts are steadier than wall-clock time: run it
under callgrind twice and subtract (startup cancels out). ROSETTASERVE_INLINE_US keeps the
identity model on the event loop thread even at valgrind's speed:

    for n in 1000 3000; do PYTHONHASHSEED=0 ROSETTASERVE_INLINE_US=1000000 valgrind \\
        --tool=callgrind --callgrind-out-file=/tmp/cg.$n .venv/bin/python \\
        bench/grpc_path_cost.py REPO --requests $n --rounds 1; done   # (3000 - 1000) / 2000
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import uvloop

from rosettaserve.protocols.oip.grpc import RPCS, OipServicer
from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from rosettaserve.server import Server
from rosettaserve.settings import Settings
from rosettaserve.transport.grpc import CallTracker, guarded

SEED = 20260801  # bench/compare's small tensor


class NoDeadline:
    """The one part of a grpc.aio servicer context ModelInfer reads."""

    def time_remaining(self) -> None:
        return None


def _identity(message: Any) -> Any:
    return message


def infer_request(model: str, raw: bool) -> bytes:
    tensor = np.random.default_rng(SEED).standard_normal((1, 4)).astype(np.float32)
    request = pb.ModelInferRequest(model_name=model)
    item = request.inputs.add(name="INPUT0", datatype="FP32", shape=list(tensor.shape))
    if raw:
        request.raw_input_contents.append(tensor.astype("<f4").tobytes())
    else:
        item.contents.fp32_contents.extend(tensor.reshape(-1).tolist())
    return bytes(request.SerializeToString())


async def measure(repo: Path, message: bytes, requests: int, rounds: int) -> None:
    server = Server(Settings(repository=repo))
    await server.repository.load_all()
    server.dataplane.started = True
    tracker = CallTracker()
    call = guarded("ModelInfer", OipServicer(server.dataplane, tracker).ModelInfer, tracker)
    request_type, response_type, _ = RPCS["ModelInfer"]
    read = _identity if request_type is bytes else request_type.FromString
    write = _identity if response_type is bytes else response_type.SerializeToString
    context = NoDeadline()
    best = float("inf")
    size = 0
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(requests):
            size = len(write(await call(read(message), context)))
        best = min(best, (time.perf_counter() - start) / requests)
    if not size:
        raise SystemExit("no response")
    print(f"{best * 1e6:.1f} us per call (best of {rounds} rounds of {requests})")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("repository", type=Path)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--model", default="identity")
    parser.add_argument("--raw", action="store_true", help="raw_input_contents, not fp32_contents")
    args = parser.parse_args()
    message = infer_request(args.model, args.raw)
    uvloop.run(measure(args.repository, message, args.requests, args.rounds))


if __name__ == "__main__":
    main()
