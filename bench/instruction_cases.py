"""bench/instructions.py's cases: what each sends, how a round waits for its answers, how the
answers are checked. Each runner has ``warm_up``, ``measure`` (the instrumented part: as little
of the runner's own work in it as can be), ``check`` (a problem, or "") and ``units``."""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import json
import struct
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from inproc_server import Served, Tally, Wire, feed, h2_frames, http_answers, joined

WARM_UP = 300  # rounds before the measured ones
SPIN_LIMIT = 100_000  # rounds of the loop a round of answers may take

SMALL_BODY = (  # bench/rest_path_instructions.py's
    b'{"inputs":[{"name":"INPUT0","shape":[1,4],"datatype":"FP32","data":[1.0,2.0,3.0,4.0]}]}'
)
GRPC_SEED = 20260801  # bench/compare's small tensor (bench/compare/bodies.py)
SERVICE = "inference.GRPCInferenceService"


def rest_request(model: str, body: bytes) -> bytes:
    head = (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: bench\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class Rounds:
    """Tensor requests: a round sends one on each connection, then runs the loop until the
    writes the warm-up's rounds made are made again."""

    what = "request"

    def __init__(self, conns: list[tuple[Any, Wire]], tally: Tally, rounds: int) -> None:
        self.conns, self.tally, self.rounds = conns, tally, rounds
        self.buffered = all(hasattr(conn, "get_buffer") for conn, _ in conns)
        self.units = rounds * len(conns)
        self.per_round = 0
        self.plans: list[list[tuple[Any, bytes, int]]] = []

    def requests(self, round_: int) -> list[tuple[Any, bytes, int]]:
        """Each connection's request in round ``round_``: (connection, bytes, length)."""
        raise NotImplementedError

    def answers(self, wire: Wire, pending: bytes) -> tuple[int, bytes, str]:
        """Whole answers in ``pending`` + what ``wire`` took: how many, the rest, a problem."""
        raise NotImplementedError

    async def warm_up(self) -> None:
        pending = [b""] * len(self.conns)
        made: list[int] = []
        for r in range(WARM_UP):
            before = self.tally.writes
            for conn, data, _ in self.requests(r):
                feed(conn, data)
            done = [0] * len(self.conns)
            for _ in range(SPIN_LIMIT):
                for i, (_, wire) in enumerate(self.conns):
                    count, pending[i], problem = self.answers(wire, pending[i])
                    if problem:
                        sys.exit(f"instructions.py: warm-up round {r}: {problem}")
                    done[i] += count
                if all(d >= 1 for d in done):
                    break
                await asyncio.sleep(0)
            else:
                sys.exit(f"instructions.py: warm-up round {r} was not answered")
            made.append(self.tally.writes - before)
        steady = set(made[WARM_UP // 2 :])
        if len(steady) != 1:
            sys.exit(f"instructions.py: the writes of a round vary ({sorted(steady)})")
        self.per_round = made[-1]
        self.plans = [self.requests(r) for r in range(WARM_UP, WARM_UP + self.rounds)]
        gc.freeze()  # what the warm-up left (caches), out of the collections as start-up's is

    async def measure(self) -> None:
        """The rounds, the requests fed as ``feed`` feeds them, inline: a call less a request in
        the figure."""
        tally, per_round, sleep = self.tally, self.per_round, asyncio.sleep
        target = tally.writes
        for plan in self.plans:
            if self.buffered:
                for conn, data, n in plan:
                    buffer = conn.get_buffer(n)
                    if len(buffer) >= n:
                        buffer[:n] = data
                        conn.buffer_updated(n)
                    else:
                        feed(conn, data)
            else:
                for conn, data, _ in plan:
                    conn.data_received(data)
            target += per_round
            spins = 0
            while tally.writes < target:
                await sleep(0)
                spins += 1
                if spins > SPIN_LIMIT:
                    sys.exit("instructions.py: a round was not answered")

    async def check(self) -> str:
        await asyncio.sleep(0)
        for i, (_, wire) in enumerate(self.conns):
            count, rest, problem = self.answers(wire, b"")
            if problem or rest or count != self.rounds:
                return f"connection {i}: {count} whole answers of {self.rounds} {problem}"
        return ""


class Rest(Rounds):
    def __init__(self, served: Served, connections: int, rounds: int, request: bytes) -> None:
        tally = Tally()
        super().__init__([served.http_connection(tally) for _ in range(connections)], tally, rounds)
        self.plan = [(conn, request, len(request)) for conn, _ in self.conns]

    def requests(self, round_: int) -> list[tuple[Any, bytes, int]]:
        return self.plan

    def answers(self, wire: Wire, pending: bytes) -> tuple[int, bytes, str]:
        found, rest = http_answers(pending + wire.take())
        for status, body in found:
            if status != 200 or b'"outputs"' not in body:
                return 0, rest, f"answered {status}: {body[:300]!r}"
        return len(found), rest, ""


def model_infer_request(model: str, values: list[float]) -> bytes:
    """A ModelInferRequest (grpc_service.proto) with one FP32 [1, n] input in
    ``fp32_contents``, written as protobuf writes it (bench/grpc_path_cost.py's request)."""

    def field(number: int, payload: bytes) -> bytes:  # length-delimited, payload < 128 bytes
        return bytes([number << 3 | 2, len(payload)]) + payload

    floats = struct.pack(f"<{len(values)}f", *values)
    contents = field(6, floats)  # InferTensorContents.fp32_contents (packed)
    tensor = field(1, b"INPUT0") + field(2, b"FP32") + field(3, bytes([1, len(values)]))
    tensor += field(5, contents)  # InferInputTensor: name, datatype, shape (packed), contents
    return field(1, model.encode()) + field(5, tensor)  # model_name, inputs


def predict_request(model: str, values: list[float]) -> bytes:
    """TF Serving's PredictRequest (predict.proto) with one FP32 [1, n] input ``INPUT0`` in
    ``tensor_content``, as ``tf.make_tensor_proto`` and protobuf write it."""

    def field(number: int, payload: bytes) -> bytes:  # length-delimited, payload < 128 bytes
        return bytes([number << 3 | 2, len(payload)]) + payload

    dims = field(2, bytes([0x08, 1])) + field(2, bytes([0x08, len(values)]))  # Dim.size
    content = struct.pack(f"<{len(values)}f", *values)
    tensor = bytes([0x08, 1]) + field(2, dims) + field(4, content)  # DT_FLOAT, shape, content
    entry = field(1, b"INPUT0") + field(2, tensor)  # the inputs map's entry: key, value
    return field(1, field(1, model.encode())) + field(2, entry)  # model_spec.name, inputs


def literal(name: str, value: str) -> bytes:
    """An HPACK literal without indexing, new name (no Huffman): costs the server a little more
    than a client's indexed fields (bench/grpc_path_cost.py)."""
    return bytes([0, len(name)]) + name.encode() + bytes([len(value)]) + value.encode()


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    head = len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big")
    return head + payload


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 7, 8
END_STREAM, END_HEADERS = 0x1, 0x4
MAX_WINDOW = (1 << 31) - 1


def header_block(path: str) -> bytes:
    """:method POST, :scheme http, :path, :authority, content-type, te (as
    bench/grpc_path_cost.py)."""
    block = bytes([0x83, 0x86]) + bytes([0x04, len(path)]) + path.encode()
    block += bytes([0x01, 9]) + b"127.0.0.1" + bytes([0x0F, 0x10, 16]) + b"application/grpc"
    return block + literal("te", "trailers")


BLOCK = header_block(f"/{SERVICE}/ModelInfer")
PREDICT_BLOCK = header_block("/tensorflow.serving.PredictionService/Predict")


class Grpc(Rounds):
    def __init__(
        self, served: Served, connections: int, rounds: int, *, tfserving: bool = False
    ) -> None:
        tally = Tally()
        super().__init__([served.grpc_connection(tally) for _ in range(connections)], tally, rounds)
        tensor = np.random.default_rng(GRPC_SEED).standard_normal((1, 4)).astype(np.float32)
        values = [float(v) for v in tensor.reshape(-1)]
        if tfserving:
            message, self.block = predict_request("identity", values), PREDICT_BLOCK
        else:
            message, self.block = model_infer_request("identity", values), BLOCK
        self.data = b"\x00" + len(message).to_bytes(4, "big") + message
        setting = (4).to_bytes(2, "big") + MAX_WINDOW.to_bytes(4, "big")  # INITIAL_WINDOW_SIZE
        window = (MAX_WINDOW - 65535).to_bytes(4, "big")
        opening = PREFACE + frame(SETTINGS, 0, 0, setting) + frame(WINDOW_UPDATE, 0, 0, window)
        for conn, _ in self.conns:
            feed(conn, opening)
        for _, wire in self.conns:
            wire.take()  # the server's SETTINGS
        self.calls: dict[int, list[bytes]] = {}

    def requests(self, round_: int) -> list[tuple[Any, bytes, int]]:
        stream = 1 + 2 * round_
        call = frame(HEADERS, END_HEADERS, stream, self.block)
        call += frame(DATA, END_STREAM, stream, self.data)
        return [(conn, call, len(call)) for conn, _ in self.conns]

    def answers(self, wire: Wire, pending: bytes) -> tuple[int, bytes, str]:
        found, rest = h2_frames(pending + wire.take())
        ended = 0
        for kind, flags, stream, payload in found:
            if kind in (RST_STREAM, GOAWAY):
                return 0, rest, f"frame {kind} on stream {stream}: {payload!r}"
            if kind == DATA and b"OUTPUT0" in payload:
                self.calls.setdefault(stream, []).append(payload)
            if kind == HEADERS and flags & END_STREAM:
                if stream not in self.calls:  # trailers only: an error
                    return 0, rest, f"stream {stream} ended without an answer: {payload!r}"
                ended += 1
        return ended, rest, ""


class Tokens:
    """``--streams`` chat completions streamed at once; measured: ``--tokens`` writes of each,
    from its ``LEAD``th write on, each holding one token."""

    what = "token"
    LEAD = 8  # writes of each stream before the measured ones: the head, the first tokens
    TAIL = 8  # tokens asked for beyond the measured ones

    def __init__(self, served: Served, streams: int, tokens: int) -> None:
        self.served, self.streams, self.tokens = served, streams, tokens
        self.units = streams * tokens
        self.conns: list[tuple[Any, Wire]] = []
        self.marks: list[int] = []

    @staticmethod
    def body(max_tokens: int) -> bytes:
        messages = [{"role": "user", "content": "Tell me a story about a cat and a boat."}]
        doc = {"model": "tiny_llama", "messages": messages, "stream": True}
        doc |= {"max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
        body = json.dumps(doc).encode()
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body

    async def warm_up(self) -> None:
        long_wait()
        # the loop and the engine take turns where they block, not where a time slice ends:
        # at the same points in every run (valgrind's slowdown makes time slices meaningless)
        sys.setswitchinterval(60.0)
        conn, wire = self.served.http_connection()
        feed(conn, self.body(self.LEAD))
        await finished([wire])
        self.conns = [self.served.http_connection() for _ in range(self.streams)]
        for conn, _ in self.conns:
            feed(conn, self.body(self.LEAD + self.tokens + self.TAIL))
        await self.writes(self.LEAD)
        self.marks = [len(wire.kept) for _, wire in self.conns]

    async def writes(self, count: int) -> None:
        """Until each stream has made ``count`` writes."""
        loop = asyncio.get_running_loop()
        waiters = []
        for _, wire in self.conns:
            if wire.writes < count:
                wire.until, wire.waiter = count, loop.create_future()
                waiters.append(wire.waiter)
        for waiter in waiters:
            await waiter

    async def measure(self) -> None:
        await self.writes(self.LEAD + self.tokens)

    async def check(self) -> str:
        wires = [wire for _, wire in self.conns]
        kept = [[joined(write) for write in wire.kept] for wire in wires]
        await finished(wires)
        for i, (writes, mark) in enumerate(zip(kept, self.marks, strict=True)):
            for data in writes[mark : mark + self.tokens]:
                if data.count(b"data: ") != 1 or b'"finish_reason":"' in data:
                    return f"stream {i}: a measured write is not one token: {data[:300]!r}"
        return ""


def long_wait() -> None:
    """The engine waits for the loop to pass each step's tokens on (as it does at full speed)."""
    for name in ("rosettaserve.runtimes.llm.stream",):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "HANDOVER_WAIT_S"):
            module.HANDOVER_WAIT_S = 600.0
            return
    print("instructions.py: no HANDOVER_WAIT_S found; the engine may run ahead", file=sys.stderr)


async def finished(wires: list[Wire]) -> None:
    """Until each wire holds one whole answer, a 200 ending with [DONE]."""
    for _ in range(36000):  # half an hour under valgrind
        whole = [http_answers(b"".join(joined(k) for k in w.kept))[0] for w in wires]
        if all(whole):
            break
        await asyncio.sleep(0.05)
    else:
        sys.exit("instructions.py: a stream did not finish")
    for found in whole:
        status, body = found[0]
        if status != 200 or b"data: [DONE]" not in body:
            sys.exit(f"instructions.py: a stream answered {status}: {body[:300]!r}")


def rest_small(served: Served, args: argparse.Namespace) -> Rounds:
    return Rest(served, args.connections, args.rounds or 2000, rest_request("identity", SMALL_BODY))


def grpc_small(served: Served, args: argparse.Namespace) -> Rounds:
    return Grpc(served, args.connections, args.rounds or 2000)


def tf_small(served: Served, args: argparse.Namespace) -> Rounds:
    return Grpc(served, args.connections, args.rounds or 2000, tfserving=True)


def batched(served: Served, args: argparse.Namespace) -> Rounds:
    import batching_mlp  # bench/batching_instructions.py's body

    body, _ = batching_mlp.request_body(batching_mlp.build_parser().parse_args([]))
    return Rest(served, 32, args.rounds or 100, rest_request("head", body))


def llm_token(served: Served, args: argparse.Namespace) -> Tokens:
    return Tokens(served, args.streams, args.tokens)


RUNNERS: dict[str, Callable[[Served, argparse.Namespace], Any]] = {
    "rest_small": rest_small,
    "grpc_small": grpc_small,
    "tf_small": tf_small,
    "batched": batched,
    "llm_token": llm_token,
}
