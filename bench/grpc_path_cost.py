"""The server's own cost of one OIP gRPC ModelInfer call, in-process: frames in, frames out.

    taskset -c 0 .venv/bin/python bench/grpc_path_cost.py REPO [--requests 20000] [--rounds 7]
        [--model identity] [--raw | --tfserving] [--access-log off|text|json]

Loads REPO (by default one with a python identity model named ``identity``, as
``identity_repo`` in bench/compare/rosetta.py writes it), makes the server's gRPC port
(``transport.grpc.GrpcServer``) without a socket, and per call feeds one HTTP/2 connection the
frames a client sends for ModelInfer (HEADERS, then DATA ending the stream), lets the loop run
until the call's answer is written (HEADERS, DATA, trailers) to a transport that only counts
bytes. The request is bench/compare's gRPC small case (FP32 [1,4] in ``fp32_contents``; with
--raw, in ``raw_input_contents``; with --tfserving, TF Serving's Predict with the same tensor in
``tensor_content``, as ``tf.make_tensor_proto`` writes it). The request headers are sent as
literals (no HPACK dynamic table), which costs the server a little more than a real client's
indexed ones. Prints the best round's microseconds per call.

As with bench/rest_path_cost.py, instruction counts are steadier than wall-clock time: run it
under callgrind twice and subtract (startup cancels out). ROSETTASERVE_INLINE_US keeps the
identity model on the event loop thread even at valgrind's speed:

    for n in 1000 3000; do PYTHONHASHSEED=0 ROSETTASERVE_INLINE_US=1000000 valgrind \\
        --tool=callgrind --callgrind-out-file=/tmp/cg.$n .venv/bin/python \\
        bench/grpc_path_cost.py REPO --requests $n --rounds 1; done   # (3000 - 1000) / 2000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

import numpy as np
import uvloop

from rosettaserve.observability import logging_setup
from rosettaserve.protocols.oip.grpc import RPCS, SERVICE, OipServicer
from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from rosettaserve.protocols.tfserving import grpc as tfgrpc
from rosettaserve.protocols.tfserving import messages, tensorproto
from rosettaserve.server.server import Server
from rosettaserve.server.settings import Settings
from rosettaserve.transport import h2, h2_wire
from rosettaserve.transport.grpc import GrpcServer
from rosettaserve.transport.hpack import encode

SEED = 20260801  # bench/compare's small tensor


class CountingTransport:
    """Where the connection writes: only the byte count is kept."""

    def __init__(self) -> None:
        self.written = 0

    def get_extra_info(self, name: str) -> None:
        return None

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def writelines(self, parts: list[bytes]) -> None:
        self.written += sum(len(p) for p in parts)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def headers(path: str) -> bytes:
    """The request headers of every call (encoded once: the client's cost is not the server's)."""
    return encode(
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "127.0.0.1"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
    )


BLOCK = headers(f"/{SERVICE}/ModelInfer")
PREDICT_BLOCK = headers(f"/{tfgrpc.PREDICTION_SERVICE}/Predict")


def client_frames(stream_id: int, message: bytes, block: bytes = BLOCK) -> bytes:
    """A call as a client sends it: HEADERS, then DATA ending the stream."""
    data = b"\x00" + len(message).to_bytes(4, "big") + message
    return b"".join(
        [
            h2_wire.frame(h2_wire.HEADERS, h2_wire.END_HEADERS, stream_id, len(block)),
            block,
            h2_wire.frame(h2_wire.DATA, h2_wire.END_STREAM, stream_id, len(data)),
            data,
        ]
    )


def infer_request(model: str, raw: bool) -> bytes:
    tensor = np.random.default_rng(SEED).standard_normal((1, 4)).astype(np.float32)
    request = pb.ModelInferRequest(model_name=model)
    item = request.inputs.add(name="INPUT0", datatype="FP32", shape=list(tensor.shape))
    if raw:
        request.raw_input_contents.append(tensor.astype("<f4").tobytes())
    else:
        item.contents.fp32_contents.extend(tensor.reshape(-1).tolist())
    return bytes(request.SerializeToString())


def predict_request(model: str) -> bytes:
    tensor = np.random.default_rng(SEED).standard_normal((1, 4)).astype(np.float32)
    request = messages.PredictRequest()
    request.model_spec.name = model
    request.inputs["INPUT0"].CopyFrom(tensorproto.make(tensor, "FP32"))
    return bytes(request.SerializeToString())


async def measure(
    repo: Path, message: bytes, requests: int, rounds: int, *, access_log: str, block: bytes
) -> None:
    server = Server(Settings(repository=repo, access_log=access_log != "off", log_level="info"))
    await server.repository.load_all()
    server.dataplane.started = True
    services = [(SERVICE, OipServicer(server.dataplane, server.calls), RPCS)]
    services += tfgrpc.services(server.dataplane)
    port = GrpcServer(services, 1 << 30, server.calls)
    if access_log != "off":  # its lines formatted and written, to /dev/null
        logging_setup.configure("info", access_log, stream=open(os.devnull, "w"))  # noqa: SIM115
        port.call_lines = None if server.access is None else server.access.call_lines()
    conn = h2.Connection(port.h2)
    transport = CountingTransport()
    conn.connection_made(transport)
    window = h2_wire.MAX_WINDOW - h2_wire.DEFAULT_WINDOW  # the client's windows: wide open
    setting = (h2_wire.INITIAL_WINDOW_SIZE).to_bytes(2, "big") + h2_wire.MAX_WINDOW.to_bytes(
        4, "big"
    )
    conn.data_received(
        h2_wire.PREFACE
        + h2_wire.frame(h2_wire.SETTINGS, 0, 0, 6)
        + setting
        + h2_wire.frame(h2_wire.WINDOW_UPDATE, 0, 0, 4)
        + window.to_bytes(4, "big")
    )
    best = float("inf")
    stream_id = 1
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(requests):
            conn.data_received(client_frames(stream_id, message, block))
            stream_id += 2
            while conn.streams:
                await asyncio.sleep(0)
            await asyncio.sleep(0)  # the write round's flush
        best = min(best, (time.perf_counter() - start) / requests)
    if conn.transport is None or not transport.written:
        raise SystemExit("the connection failed")
    print(f"{best * 1e6:.1f} us per call (best of {rounds} rounds of {requests})")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("repository", type=Path)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--model", default="identity")
    parser.add_argument("--raw", action="store_true", help="raw_input_contents, not fp32_contents")
    parser.add_argument("--tfserving", action="store_true", help="TF Serving's Predict instead")
    parser.add_argument(
        "--access-log",
        choices=("off", "text", "json"),
        default="off",
        help="the server's access log (and request ids): off, or on in this format",
    )
    args = parser.parse_args()
    message = infer_request(args.model, args.raw)
    block = BLOCK
    if args.tfserving:
        message, block = predict_request(args.model), PREDICT_BLOCK
    uvloop.run(
        measure(
            args.repository,
            message,
            args.requests,
            args.rounds,
            access_log=args.access_log,
            block=block,
        )
    )


if __name__ == "__main__":
    main()
