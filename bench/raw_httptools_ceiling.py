"""The ceiling of a Python HTTP/1.1 server on this host: uvloop and httptools, every request
answered with the same small JSON body (the size of an OIP REST answer to FP32 [1,4]), no
routing, no model, no JSON -- what is left of a request when the server does nothing.

    taskset -c 0 .venv/bin/python bench/raw_httptools_ceiling.py PORT [--coalesce]
    taskset -c 1 wrk -t1 -c16 -d10s -s POST.lua http://127.0.0.1:PORT/v2/models/identity/infer

``--coalesce``: the answers of one round of reads leave together at its end (one write per
connection, as rosettaserve's ``transport/coalesce.py`` does); without it each is written at once.
``--oip``: instead of the constant, the least a Python server does for an OIP REST inference and
nothing more -- the body parsed by orjson, the first input made a numpy array of its datatype and
shape, handed back as the output, the answer written by orjson -- with no routing, no check, no
error path, no metrics: the floor of any Python OIP server's CPU per request on this host.
The server prints ``ready`` once it listens. Issue 29 measures the server's requests per second
and CPU per request against this one's.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
from typing import Any

import httptools
import numpy as np
import orjson
import uvloop

BODY = (
    b'{"model_name":"identity","model_version":"1","outputs":[{"name":"OUTPUT0",'
    b'"datatype":"FP32","shape":[1,4],"data":[1.0,2.0,3.0,4.0]}]}'
)
ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(BODY)
    + BODY
)


_NUMPY_TYPES = {"FP32": np.float32, "FP64": np.float64, "INT32": np.int32, "INT64": np.int64}


def oip_answer(body: bytes) -> bytes:
    """Identity over OIP REST JSON with nothing but the work itself."""
    doc = orjson.loads(body)
    item = doc["inputs"][0]
    data = np.array(item["data"], dtype=_NUMPY_TYPES[item["datatype"]]).reshape(item["shape"])
    out = {"name": "OUTPUT0", "datatype": item["datatype"], "shape": list(data.shape), "data": data}
    answer = {"model_name": "identity", "model_version": "1", "outputs": [out]}
    text = orjson.dumps(answer, option=orjson.OPT_SERIALIZE_NUMPY)
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    return head % len(text) + text


class Round:
    """Connections with answers waiting for the end of this round of reads."""

    def __init__(self) -> None:
        self.waiting: list[Connection] = []

    def add(self, conn: Connection) -> None:
        self.waiting.append(conn)
        if len(self.waiting) == 1:
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        waiting, self.waiting = self.waiting, []
        for conn in waiting:
            conn.flush()


class Connection(asyncio.Protocol):
    def __init__(self, round_: Round | None, oip: bool) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.round = round_
        self.oip = oip
        self.body: list[bytes] = []
        self.transport: Any = None
        self.out: list[bytes] = []

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        answer = ANSWER
        if self.oip:
            answer = oip_answer(b"".join(self.body))
        self.body.clear()
        if self.round is None:
            self.transport.write(answer)
            return
        if not self.out:
            self.round.add(self)
        self.out.append(answer)

    def flush(self) -> None:
        out, self.out = self.out, []
        if self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(out)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(port: int, coalesce: bool, oip: bool) -> None:
    round_ = Round() if coalesce else None
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Connection(round_, oip), "127.0.0.1", port, backlog=1024
    )
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("port", type=int)
    parser.add_argument("--coalesce", action="store_true")
    parser.add_argument("--oip", action="store_true")
    args = parser.parse_args()
    uvloop.run(serve(args.port, args.coalesce, args.oip))


if __name__ == "__main__":
    main()
