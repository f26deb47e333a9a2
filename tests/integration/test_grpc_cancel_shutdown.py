"""SIGTERM stops a server promptly after gRPC calls its clients cancelled (#24 item 6).

A call cancelled by its client, with a RST_STREAM(CANCEL) in the same read as the request, used
to leave the transport's count of busy calls behind: the task that was to run the rest of the call
was cancelled before its first step, so the call never left its ``with tracker.busy()``, and
SIGTERM waited the whole drain grace (60 s) with nothing in flight. It shows in the compiled build
(``make native``): a mypyc coroutine dropped while suspended does not run its ``with`` exits, as
CPython's own coroutines do when freed; tests/unit/transport/test_grpc_server.py checks the same
in pure Python, where the cancellation must reach the servicer. The waits below are upper bounds
against a hang, not timings.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import CancelledError
from pathlib import Path

import grpc
import h2.errors
import numpy as np
import pytest

from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from tests.conftest import TEST_MODELS
from tests.integration.h2client import H2Client, grpc_frame, grpc_messages
from tests.rfc.h2_support import GOAWAY, RawH2
from tests.serverproc import ServerProcess, start_server

INFER = "/inference.GRPCInferenceService/ModelInfer"
EXIT_BOUND_S = 5.0  # "within a second" with nothing in flight: a hang guard, with room for CI


def request(sleep: float) -> bytes:
    message = pb.ModelInferRequest(model_name="slow_python")
    message.inputs.add(name="INPUT0", datatype="FP32", shape=[2])
    message.raw_input_contents.append(np.array([1, 2], "<f4").tobytes())
    message.parameters["sleep"].double_param = sleep
    return bytes(message.SerializeToString())


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    shutil.copytree(TEST_MODELS / "slow_python", tmp_path / "slow_python")
    proc = start_server(tmp_path)
    yield proc
    if proc.proc.poll() is None:
        proc.proc.kill()
        proc.proc.wait()


def exits_after_sigterm(server: ServerProcess) -> int:
    """SIGTERM; the exit status, which must come within EXIT_BOUND_S."""
    server.proc.send_signal(signal.SIGTERM)
    try:
        return server.proc.wait(timeout=EXIT_BOUND_S)
    except subprocess.TimeoutExpired:
        pytest.fail("SIGTERM did not stop the server in time:\n" + "\n".join(server.lines[-20:]))


def test_calls_reset_with_their_request_do_not_hold_shutdown_back(server: ServerProcess) -> None:
    """RST_STREAM(CANCEL) in the same write as the request's HEADERS and DATA."""
    with H2Client(server.grpc_address) as client:
        ok = client.call(INFER, request(0.0))
        assert ok.ok, ok.describe()
        for _ in range(3):
            stream_id = client.open_stream()
            client.conn.send_headers(stream_id, client.request_headers(INFER))
            client.conn.send_data(stream_id, grpc_frame(request(0.2)), end_stream=True)
            client.conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
            client.flush()
        client.ping(b"synced!!")  # the server has read every reset
    # nothing more: a collection of the garbage collector would have hidden the leak
    assert exits_after_sigterm(server) == 0, "\n".join(server.lines)


@pytest.mark.parametrize("after", [0.0, 0.05, 0.3], ids=["at-once", "soon", "while-at-work"])
def test_calls_cancelled_by_grpcio_do_not_hold_shutdown_back(
    server: ServerProcess, after: float
) -> None:
    """grpcio's ``future.cancel()`` on calls to a slow model, at once or while it works."""
    with grpc.insecure_channel(server.grpc_address) as channel:
        infer = channel.unary_unary(INFER)
        assert infer(request(0.0), timeout=30)  # the channel is connected
        futures = [infer.future(request(0.5), timeout=30) for _ in range(5)]
        time.sleep(after)  # when to cancel, not an assertion
        for future in futures:
            future.cancel()
        for future in futures:
            with pytest.raises((CancelledError, grpc.FutureCancelledError)):
                future.result(timeout=10)
        assert infer(request(0.0), timeout=30)  # the server goes on
        # the cancelled model work (0.5 s at most) ends on its own
    assert exits_after_sigterm(server) == 0, "\n".join(server.lines)


def test_sigterm_with_a_call_in_flight_lets_it_finish_then_exits(server: ServerProcess) -> None:
    """With a call at work, SIGTERM lets it finish and answers it, then exits."""
    with RawH2(server.grpc_address) as client:
        stream_id = client.request(body=grpc_frame(request(1.0)))
        client.sync()  # the server has read the request: the call is at work
        server.proc.send_signal(signal.SIGTERM)
        goaway = client.wait(lambda f: f.kind == GOAWAY)
        assert goaway.payload[4:8] == b"\0\0\0\0"  # NO_ERROR: the call goes on
        client.assert_ok(stream_id)
        answer = pb.ModelInferResponse.FromString(grpc_messages(client.data[stream_id])[0])
        assert answer.raw_output_contents[0] == np.array([1, 2], "<f4").tobytes()
    try:
        assert server.proc.wait(timeout=EXIT_BOUND_S) == 0, "\n".join(server.lines)
    except subprocess.TimeoutExpired:
        pytest.fail("the server did not exit once its call was answered")
