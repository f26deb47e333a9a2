"""Sequences over gRPC with tritonclient.grpc: ModelInfer and the ModelStreamInfer stream carry
sequence_id (integer or string), sequence_start and sequence_end; the server keeps each
sequence's running sum; the errors and the model configuration are Triton's.
(REST and the scheduling itself: tests/integration/test_sequences.py.)"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.integration.sequence_support import sequence_repository
from tests.serverproc import ServerProcess, served, start_server
from tests.tritonclient_common import expect_error

STREAM_TIMEOUT_S = 60.0  # a hang guard


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = sequence_repository(tmp_path_factory.mktemp("sequences_grpc"))
    yield from served(start_server(repo))


@pytest.fixture
def client(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(server.grpc_address)
    yield client
    client.close()


def tensor(model: str, value: int) -> grpcclient.InferInput:
    shape = [1] if model == "accumulate_text" else [1, 1]
    item = grpcclient.InferInput("INPUT", shape, "INT32")
    item.set_data_from_numpy(np.full(shape, value, np.int32))
    return item


def send(
    client: grpcclient.InferenceServerClient,
    model: str,
    value: int,
    sequence_id: int | str,
    **flags: Any,
) -> tuple[int, Any]:
    result = client.infer(model, [tensor(model, value)], sequence_id=sequence_id, **flags)
    return int(result.as_numpy("OUTPUT").reshape(-1)[0]), result.as_numpy("CORRID_OUT").reshape(-1)[
        0
    ]


def test_interleaved_sequences_over_model_infer(
    client: grpcclient.InferenceServerClient,
) -> None:
    assert send(client, "accumulate", 1, 11, sequence_start=True) == (1, 11)
    assert send(client, "accumulate", 50, 12, sequence_start=True) == (50, 12)
    assert send(client, "accumulate", 2, 11) == (3, 11)
    assert send(client, "accumulate", 50, 12, sequence_end=True) == (100, 12)
    assert send(client, "accumulate", 3, 11, sequence_end=True) == (6, 11)


def test_string_ids_over_model_infer(client: grpcclient.InferenceServerClient) -> None:
    assert send(client, "accumulate_text", 2, "left", sequence_start=True) == (2, b"left")
    assert send(client, "accumulate_text", 7, "right", sequence_start=True) == (7, b"right")
    assert send(client, "accumulate_text", 2, "left", sequence_end=True) == (4, b"left")
    assert send(client, "accumulate_text", 7, "right", sequence_end=True) == (14, b"right")


@pytest.mark.parametrize(
    ("model", "ids"), [("accumulate", [21, 22]), ("accumulate_text", ["a", "b"])]
)
def test_interleaved_sequences_over_the_stream(
    client: grpcclient.InferenceServerClient, model: str, ids: list[Any]
) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put(error or result))
    steps = [(ids[i % 2], i + 1, i < 2, i >= 4) for i in range(6)]
    try:
        for request_id, (sequence_id, value, start, end) in enumerate(steps):
            client.async_stream_infer(
                model,
                [tensor(model, value)],
                request_id=str(request_id),
                sequence_id=sequence_id,
                sequence_start=start,
                sequence_end=end,
            )
            answer = answers.get(timeout=STREAM_TIMEOUT_S)  # one at a time: in order
            assert not isinstance(answer, Exception), answer
            assert answer.get_response().id == str(request_id)
            sums = int(answer.as_numpy("OUTPUT").reshape(-1)[0])
            assert sums == sum(v for s, v, *_ in steps[: request_id + 1] if s == sequence_id)
    finally:
        client.stop_stream()


def test_errors_over_grpc_are_triton_s(client: grpcclient.InferenceServerClient) -> None:
    expect_error(
        lambda: send(client, "accumulate", 1, 0),
        "StatusCode.INVALID_ARGUMENT",
        "inference request to model 'accumulate' must specify a non-zero or non-empty "
        "correlation ID",
    )
    expect_error(
        lambda: send(client, "accumulate", 1, 31),
        "StatusCode.INVALID_ARGUMENT",
        "inference request for sequence 31 to model 'accumulate' must specify the START flag on "
        "the first request of the sequence",
    )
    expect_error(
        lambda: send(client, "accumulate_text", 1, "unknown"),
        "StatusCode.INVALID_ARGUMENT",
        "inference request for sequence unknown to model 'accumulate_text' must specify the "
        "START flag",
    )


def test_the_configuration_over_grpc(client: grpcclient.InferenceServerClient) -> None:
    batching = client.get_model_config("accumulate").config.sequence_batching
    assert batching.HasField("direct")
    assert batching.max_sequence_idle_microseconds == 60_000_000
    assert [c.name for c in batching.control_input] == ["START", "CORRID"]
    uint64 = grpcclient.model_config_pb2.DataType.Value("TYPE_UINT64")
    assert batching.control_input[1].control[0].data_type == uint64
    assert batching.state[0].output_name == "STATE_OUT"
    oldest = client.get_model_config("oldest").config.sequence_batching.oldest
    assert (oldest.max_candidate_sequences, list(oldest.preferred_batch_size)) == (4, [2])
