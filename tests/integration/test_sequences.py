"""Sequences (model.yaml ``sequence_batching``, Triton's sequence batcher) over REST with
tritonclient.http: the server keeps each sequence's running sum (the implicit state) between
its requests, interleaved and concurrent sequences never see each other's, the CORRID control
carries the id, an idle sequence is released, and the errors are Triton's.
(gRPC and its stream: tests_tritongrpc/test_sequences_grpc.py.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.integration.gated import in_threads, wait_for
from tests.integration.sequence_support import IDLE_US, sequence_repository
from tests.serverproc import ServerProcess, served, start_server, stop_cleanly
from tests.tritonclient_common import expect_error


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = sequence_repository(tmp_path_factory.mktemp("sequences"))
    yield from served(start_server(repo))


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(server.http_hostport)
    yield client
    client.close()


def send(
    client: httpclient.InferenceServerClient,
    model: str,
    value: int,
    sequence_id: int | str,
    **flags: Any,
) -> tuple[int, Any, list[str]]:
    """One request of a sequence: the running sum, the id the model saw, the output names."""
    shape = [1] if model == "accumulate_text" else [1, 1]
    tensor = httpclient.InferInput("INPUT", shape, "INT32")
    tensor.set_data_from_numpy(np.full(shape, value, np.int32))
    result = client.infer(model, [tensor], sequence_id=sequence_id, **flags)
    names = [o["name"] for o in result.get_response()["outputs"]]
    corrid = result.as_numpy("CORRID_OUT").reshape(-1)[0]
    return int(result.as_numpy("OUTPUT").reshape(-1)[0]), corrid, names


def run_sequence(
    server: ServerProcess,
    model: str,
    sequence_id: int | str,
    values: list[int],
    pids: bool = False,
) -> Any:
    """A whole sequence on its own client: the running sums answered (``pids``: and the
    CORRID_OUT values, which ``in_process`` uses for its process id)."""
    client = httpclient.InferenceServerClient(server.http_hostport)
    try:
        answers = []
        for i, value in enumerate(values):
            flags = {"sequence_start": i == 0, "sequence_end": i == len(values) - 1}
            answers.append(send(client, model, value, sequence_id, **flags))
        sums = [a[0] for a in answers]
        return (sums, [int(a[1]) for a in answers]) if pids else sums
    finally:
        client.close()


def test_interleaved_sequences_keep_their_own_sums(
    client: httpclient.InferenceServerClient,
) -> None:
    assert send(client, "accumulate", 1, 1001, sequence_start=True) == (
        1,
        1001,
        ["OUTPUT", "CORRID_OUT"],
    )
    assert send(client, "accumulate", 100, 1002, sequence_start=True)[:2] == (100, 1002)
    assert send(client, "accumulate", 2, 1001)[0] == 3
    assert send(client, "accumulate", 200, 1002)[0] == 300
    assert send(client, "accumulate", 3, 1001, sequence_end=True)[0] == 6
    assert send(client, "accumulate", 300, 1002, sequence_end=True)[0] == 600


def test_a_start_resets_the_state(client: httpclient.InferenceServerClient) -> None:
    send(client, "accumulate", 5, 1003, sequence_start=True)
    send(client, "accumulate", 5, 1003)
    assert send(client, "accumulate", 7, 1003, sequence_start=True)[0] == 7
    assert send(client, "accumulate", 1, 1003, sequence_end=True)[0] == 8


@pytest.mark.parametrize("model", ["accumulate", "oldest"])
def test_concurrent_sequences_batched_together_keep_their_own_sums(
    server: ServerProcess, model: str
) -> None:
    values = {2000 + i: [i + 1] * 6 for i in range(8)}
    calls = [lambda sid=sid, v=v: run_sequence(server, model, sid, v) for sid, v in values.items()]
    threads, results = in_threads(calls)
    for thread in threads:
        thread.join(120)
    expected = [list(np.cumsum(v)) for v in values.values()]
    assert [results[i] for i in range(len(calls))] == expected


def test_a_sequence_stays_in_one_worker_process(server: ServerProcess) -> None:
    """``isolation: process`` with two instances: a model keeping its sums in its own process
    (by CORRID, as Triton's python-backend models do) sees all of a sequence's requests; the
    sequences are spread over both processes."""
    values = {9000 + i: [i + 1] * 5 for i in range(6)}
    calls = [
        lambda sid=sid, v=v: run_sequence(server, "in_process", sid, v, pids=True)
        for sid, v in values.items()
    ]
    threads, results = in_threads(calls)
    for thread in threads:
        thread.join(120)
    assert [r[0] for r in results] == [list(np.cumsum(v)) for v in values.values()]
    pids = [set(r[1]) for r in results]
    assert all(len(p) == 1 for p in pids)  # one process per sequence
    assert len(set.union(*pids)) == 2


def test_string_ids_reach_a_bytes_corrid(client: httpclient.InferenceServerClient) -> None:
    assert send(client, "accumulate_text", 4, "alpha", sequence_start=True)[:2] == (4, b"alpha")
    assert send(client, "accumulate_text", 1, "beta", sequence_start=True)[0] == 1
    assert send(client, "accumulate_text", 4, "alpha", sequence_end=True)[0] == 8
    assert send(client, "accumulate_text", 1, "beta", sequence_end=True)[0] == 2


def queued(server: ServerProcess, model: str) -> int:
    text = httpx.get(server.http_url + "/metrics").text
    prefix = f'rosettaserve_queued_requests{{model="{model}",version="1"}} '
    line = next((ln for ln in text.splitlines() if ln.startswith(prefix)), prefix + "0")
    return int(line.rsplit(" ", 1)[1])


def test_a_start_waits_for_a_free_slot(server: ServerProcess) -> None:
    """``one_slot`` has one slot: a second sequence's START waits until the first ends."""
    client = httpclient.InferenceServerClient(server.http_hostport)
    try:
        send(client, "one_slot", 1, 3001, sequence_start=True)
        waiting: dict[int, Any] = {}
        thread = threading.Thread(
            target=lambda: waiting.update({0: run_sequence(server, "one_slot", 3002, [10, 20])})
        )
        thread.start()
        wait_for(lambda: queued(server, "one_slot") == 1, "the second START queued")
        assert not waiting  # it has no slot yet
        assert send(client, "one_slot", 2, 3001, sequence_end=True)[0] == 3
        thread.join(60)
        assert waiting[0] == [10, 30]
    finally:
        client.close()


def test_an_idle_sequence_is_released(client: httpclient.InferenceServerClient) -> None:
    send(client, "forgetful", 1, 4001, sequence_start=True)
    time.sleep(5 * IDLE_US / 1e6)  # well past the idle time: released
    expect_error(
        lambda: send(client, "forgetful", 1, 4001),
        "400",
        "inference request for sequence 4001 to model 'forgetful' must specify the START flag "
        "on the first request of the sequence",
    )


def test_requests_without_a_sequence_are_refused(
    client: httpclient.InferenceServerClient,
) -> None:
    expect_error(
        lambda: send(client, "accumulate", 1, 0),
        "400",
        "inference request to model 'accumulate' must specify a non-zero or non-empty "
        "correlation ID",
    )
    expect_error(
        lambda: send(client, "accumulate", 1, 5001),
        "400",
        "inference request for sequence 5001 to model 'accumulate' must specify the START flag",
    )


def test_an_ended_sequence_needs_a_new_start(client: httpclient.InferenceServerClient) -> None:
    send(client, "accumulate", 1, 5002, sequence_start=True, sequence_end=True)
    expect_error(lambda: send(client, "accumulate", 1, 5002), "400", "must specify the START")
    assert send(client, "accumulate", 9, 5002, sequence_start=True)[0] == 9


def test_a_batch_of_two_rows_is_refused(client: httpclient.InferenceServerClient) -> None:
    tensor = httpclient.InferInput("INPUT", [2, 1], "INT32")
    tensor.set_data_from_numpy(np.ones((2, 1), np.int32))
    expect_error(
        lambda: client.infer("accumulate", [tensor], sequence_id=6001, sequence_start=True),
        "400",
        "inference request to model 'accumulate' must specify batch-size 1 due to requirements "
        "of sequence batcher",
    )


def test_a_string_id_for_a_uint64_corrid_is_refused(
    client: httpclient.InferenceServerClient,
) -> None:
    expect_error(
        lambda: send(client, "accumulate", 1, "text", sequence_start=True),
        "400",
        "string sequence id",
    )


def test_the_state_output_is_the_servers(client: httpclient.InferenceServerClient) -> None:
    """Not declared under ``outputs``: no client gets it (Triton's rule), asking is an error."""
    tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.ones((1, 1), np.int32))
    wanted = [httpclient.InferRequestedOutput("STATE_OUT")]
    expect_error(
        lambda: client.infer(
            "accumulate", [tensor], outputs=wanted, sequence_id=7001, sequence_start=True
        ),
        "400",
        "unexpected output 'STATE_OUT'",
    )


def test_the_configuration_shows_sequence_batching(
    client: httpclient.InferenceServerClient,
) -> None:
    config = client.get_model_config("accumulate")
    assert "dynamic_batching" not in config
    batching = config["sequence_batching"]
    assert batching["direct"] == {}
    assert batching["max_sequence_idle_microseconds"] == 60_000_000
    assert batching["control_input"][0] == {
        "name": "START",
        "control": [{"kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, 1]}],
    }
    assert batching["state"][0]["input_name"] == "STATE_IN"
    assert client.get_model_config("oldest")["sequence_batching"]["oldest"] == {
        "max_candidate_sequences": 4,
        "preferred_batch_size": [2],
        "max_queue_delay_microseconds": 1000,
    }
    assert "sequence" in client.get_server_metadata()["extensions"]


def test_with_workers_a_sequence_on_one_connection_stays_on_its_worker(
    tmp_path: Path,
) -> None:
    """``--workers 2``: the kernel spreads connections, not requests, over the workers, so the
    requests of sequences sent on one client's connection all reach the worker holding their
    state (a sequence whose requests arrive on different connections may not: docs say so)."""
    repo = sequence_repository(tmp_path / "repo")
    proc = start_server(repo, "--workers", "2")
    try:
        assert run_sequence(proc, "accumulate", 8001, [1, 2, 3, 4]) == [1, 3, 6, 10]
        assert run_sequence(proc, "accumulate_text", "w", [5, 5]) == [5, 10]
    finally:
        stop_cleanly(proc)
