"""A request that comes too slowly over HTTP/2 (``--body-timeout``, ``--body-min-rate``).

RFC 9113 lets a client take as long as it likes over a stream's DATA; a server cannot hold a
stream (and the call waiting on it) for a client that sends a byte now and then. As an HTTP/1.1
body is, a request is held to a pace: no stall longer than the body timeout, and past it, at
least the minimum rate on average. A request that stalls or drips is answered (gRPC status
DEADLINE_EXCEEDED, naming the flag) and its stream reset with NO_ERROR (RFC 9113 8.1: the answer
was whole); the other streams of its connection, and other connections, are served meanwhile
as they are alone. A call streaming its requests is timed per message: between two, the client
sends when it likes. A large request on a slow but honest link arrives whole.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import numpy as np
import pytest

from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from tests.integration.h2client import grpc_messages
from tests.rfc.h2_support import (
    DATA,
    END_STREAM,
    MODEL,
    NO_ERROR,
    RST_STREAM,
    RawH2,
    h2_server,
    infer_message,
    request_fields,
)
from tests.serverproc import ServerProcess

MIN_RATE = 20  # bytes a second a request must average past the body timeout (1 s)
STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
DEADLINE_EXCEEDED = "4"
VALUES = [1.0] * 100  # a ModelInfer of 400-odd bytes: more than a drip sends before its cut


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    flags = ["--body-timeout", "1", "--body-min-rate", str(MIN_RATE)]
    yield from h2_server(tmp_path_factory, "slow_requests", *flags)


def official_infer(server: ServerProcess) -> bytes:
    """A normal client's call (grpcio, a connection of its own): its reply, serialized."""
    request = pb.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[2])
    request.raw_input_contents.append(np.asarray([1.0, 2.0], "<f4").tobytes())
    with grpc.insecure_channel(server.grpc_address) as channel:
        infer = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        reply: pb.ModelInferResponse = infer(request, timeout=30)
    return bytes(reply.SerializeToString())


def ended(c: RawH2, stream_id: int) -> bool:
    return any(
        f.stream_id == stream_id and (f.kind == RST_STREAM or f.flags & END_STREAM)
        for f in c.frames
    )


def assert_cut(c: RawH2, stream_id: int, flag: str) -> None:
    """Answered DEADLINE_EXCEEDED naming ``flag``, then reset with NO_ERROR."""
    c.wait(lambda f: f.kind == RST_STREAM and f.stream_id == stream_id)
    trailers = c.blocks[stream_id][-1]
    assert trailers.get("grpc-status") == DEADLINE_EXCEEDED, c.seen()
    assert flag in trailers.get("grpc-message", ""), trailers
    assert c.resets(stream_id) == [NO_ERROR], c.seen()


def test_a_request_dripped_slowly_is_cut_while_its_neighbours_are_served(
    server: ServerProcess, c: RawH2
) -> None:
    """A byte every fifth of a second (never a stall, 5 a second): while it drips, another
    stream of the same connection and a grpcio client on another connection are answered as
    they are alone; then the dripping stream is answered and reset."""
    alone = official_infer(server)
    drip = c.headers(request_fields())
    message = infer_message(values=VALUES)
    served_before_the_cut = 0
    for at in range(len(message)):
        c.frame(DATA, 0, drip, message[at : at + 1])
        c.serves()  # a neighbour stream: answered, its reply checked
        assert official_infer(server) == alone
        if ended(c, drip):
            break
        served_before_the_cut += 1
        c.wait_quiet(0.2)
    assert ended(c, drip), "the dripping request was never cut"
    assert_cut(c, drip, "--body-min-rate")
    assert served_before_the_cut
    c.serves()


def test_a_request_that_stalls_is_cut(server: ServerProcess, c: RawH2) -> None:
    stalled = c.headers(request_fields())  # and nothing more
    c.frame(DATA, 0, stalled, infer_message()[:7])
    assert_cut(c, stalled, "--body-timeout")
    c.serves()


def test_a_streaming_call_waits_between_messages_but_not_inside_one(
    server: ServerProcess, c: RawH2
) -> None:
    """ModelStreamInfer: a message, then nothing for more than twice the body timeout: the
    stream is not cut, and the next message is answered; a message begun and left is cut."""
    stream = c.headers(request_fields(STREAM))
    c.frame(DATA, 0, stream, infer_message())
    c.wait(lambda f: f.kind == DATA and f.stream_id == stream)
    c.wait_quiet(2.5)
    assert not ended(c, stream), c.seen()
    c.frame(DATA, 0, stream, infer_message())
    c.wait(lambda f: len(grpc_messages(c.data.get(stream, b""))) == 2)
    c.frame(DATA, 0, stream, infer_message()[:9])
    assert_cut(c, stream, "--body-timeout")
    replies = [pb.ModelStreamInferResponse.FromString(m) for m in grpc_messages(c.data[stream])]
    assert [r.error_message for r in replies] == ["", ""]
    c.serves()


def test_a_large_request_slow_but_above_the_min_rate_is_served(
    server: ServerProcess, c: RawH2
) -> None:
    """Twenty pieces a tenth of a second apart: longer than the body timeout, each piece
    buying far more time (400 bytes / MIN_RATE = 20 s) than the wait before the next."""
    values = np.arange(2000, dtype="<f4")
    message = infer_message(values=values.tolist())
    stream = c.headers(request_fields())
    step = -(-len(message) // 20)
    for start in range(0, len(message), step):
        c.wait_quiet(0.1)
        last = start + step >= len(message)
        c.frame(DATA, END_STREAM if last else 0, stream, message[start : start + step])
    c.assert_ok(stream)
    reply = pb.ModelInferResponse.FromString(grpc_messages(c.data[stream])[0])
    assert reply.raw_output_contents[0] == values.tobytes()
