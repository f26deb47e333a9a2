"""Sequences on both servers (Triton's sequence batcher and ours): the direct and oldest
strategies, the START, END, READY and CORRID controls, integer and string correlation ids, with
tritonclient's sequence_id / sequence_start / sequence_end over REST, gRPC and gRPC's stream;
interleaved sequences, implicit state and the errors of requests a sequence cannot take."""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests_triton.clients import PROTOCOLS, client, refused, status_of
from tests_triton.servers import Peer

# two sequences taking turns: (which, value, start, end) and each answer, its running sum
TURNS = [("a", 1, True, False), ("b", 10, True, False), ("a", 2, False, False),
         ("b", 20, False, False), ("a", 3, False, True), ("b", 5, False, True)]  # fmt: skip
SUMS = [1, 10, 3, 30, 6, 35]
Send = Callable[[str, int, Any, bool, bool], int]


def value(v: int, protocol: str) -> Any:
    module: Any = httpclient if protocol == "http" else grpcclient
    given = module.InferInput("INPUT", [1, 1], "INT32")
    given.set_data_from_numpy(np.array([[v]], np.int32))
    return given


def sender(c: Any, protocol: str) -> Send:
    """One request of a sequence: its OUTPUT."""

    def send(model: str, v: int, seq: Any, start: bool, end: bool) -> int:
        result = c.infer(
            model, [value(v, protocol)], sequence_id=seq, sequence_start=start, sequence_end=end
        )
        return int(result.as_numpy("OUTPUT")[0, 0])

    return send


def take_turns(send: Send, model: str, ids: dict[str, Any]) -> list[int]:
    return [send(model, v, ids[which], start, end) for which, v, start, end in TURNS]


@pytest.mark.parametrize("model", ["accumulate", "accumulate_oldest"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_interleaved_sequences(server: Peer, protocol: str, model: str) -> None:
    """accumulate (the direct strategy) and accumulate_oldest (the oldest), a UINT64 CORRID: two
    sequences never see each other's sums (the model keys them by CORRID; READY tells a
    request's row from an empty one)."""
    ids = {"a": 1001, "b": 1002} if protocol == "http" else {"a": 2001, "b": 2002}
    with client(server, protocol) as c:
        assert take_turns(sender(c, protocol), model, ids) == SUMS


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_implicit_state_with_string_ids(server: Peer, protocol: str) -> None:
    """running_sum adds INPUT to the state the server gives it (STATE_IN) and returns the new
    state (STATE_OUT); two sequences with string ids take turns. A documented difference:
    Triton's Python backend does not keep a state the model returns (only backends calling
    TRITONBACKEND_StateUpdate do), so on Triton each request sees the initial zeros and answers
    its own INPUT; ours carries each sequence's state to its next request."""
    ids = {"a": f"{protocol}-a", "b": f"{protocol}-b"}
    with client(server, protocol) as c:
        sums = take_turns(sender(c, protocol), "running_sum", ids)
    assert sums == ([v for _, v, _, _ in TURNS] if server.name == "triton" else SUMS)


@pytest.mark.parametrize("model", ["accumulate_oldest", "running_sum"])
def test_sequences_on_grpcs_stream(server: Peer, model: str) -> None:
    """ModelStreamInfer: the sequence parameters on each message of one stream (integer ids,
    then string ids)."""
    answers: queue.Queue[Any] = queue.Queue()
    ids = {"a": 3001, "b": 3002} if model == "accumulate_oldest" else {"a": "s-a", "b": "s-b"}
    with client(server, "grpc") as c:
        c.start_stream(callback=lambda result, error: answers.put(error or result))

        def send(model: str, v: int, seq: Any, start: bool, end: bool) -> int:
            c.async_stream_infer(
                model, [value(v, "grpc")], sequence_id=seq, sequence_start=start, sequence_end=end
            )
            answer = answers.get(timeout=30)
            assert not isinstance(answer, InferenceServerException), answer
            return int(answer.as_numpy("OUTPUT")[0, 0])

        try:
            sums = take_turns(send, model, ids)
        finally:
            c.stop_stream()
    carried = model == "accumulate_oldest" or server.name != "triton"  # (implicit state above)
    assert sums == (SUMS if carried else [v for _, v, _, _ in TURNS])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_string_corrid(server: Peer, protocol: str) -> None:
    """accumulate_text: string ids reach the model in its CORRID (BYTES); an integer id arrives
    as its decimal text. Not asked of Triton: 2.51 answers every request of a model whose
    CORRID is TYPE_STRING with 400 ("unexpected number of string elements 2 for inference
    input 'CORRID', expecting 1", or another size error for an integer id) and keeps the
    request in flight, so the server then cannot stop cleanly (docs/oip.md)."""
    if server.name == "triton":
        pytest.skip("Triton 2.51 fails every request to a TYPE_STRING CORRID and leaks them")
    ids = {"a": f"{protocol}-a", "b": f"{protocol}-b"}
    with client(server, protocol) as c:
        send = sender(c, protocol)
        assert take_turns(send, "accumulate_text", ids) == SUMS
        assert send("accumulate_text", 7, 6001, True, True) == 7


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_what_a_sequence_refuses(server: Peer, protocol: str) -> None:
    """The same status and message from both: no correlation id, no START for a sequence not
    running (never started, or ended), more than one row."""
    bad = status_of(protocol, 400)
    seq = 5001 if protocol == "http" else 5002
    with client(server, protocol) as c:
        send = sender(c, protocol)
        no_id = refused(lambda: c.infer("accumulate", [value(1, protocol)]))
        assert (no_id.status(), no_id.message()) == (
            bad,
            "inference request to model 'accumulate' must specify a non-zero or non-empty "
            "correlation ID",
        )
        not_started = (
            f"inference request for sequence {seq} to model 'accumulate' must specify the START "
            "flag on the first request of the sequence"
        )
        never = refused(lambda: send("accumulate", 1, seq, False, False))
        assert (never.status(), never.message()) == (bad, not_started)
        assert send("accumulate", 1, seq, True, True) == 1
        ended = refused(lambda: send("accumulate", 1, seq, False, False))
        assert (ended.status(), ended.message()) == (bad, not_started)
        rows = value(1, protocol)
        rows.set_shape([2, 1])
        rows.set_data_from_numpy(np.array([[1], [2]], np.int32))
        text = refused(lambda: send("running_sum", 1, "never", False, False))
        assert (text.status(), text.message()) == (
            bad,
            "inference request for sequence never to model 'running_sum' must specify the "
            "START flag on the first request of the sequence",
        )
        two = refused(lambda: c.infer("accumulate", [rows], sequence_id=seq, sequence_start=True))
        assert (two.status(), two.message()) == (
            bad,
            "inference request to model 'accumulate' must specify batch-size 1 due to "
            "requirements of sequence batcher",
        )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_string_id_to_an_integer_corrid(server: Peer, protocol: str) -> None:
    """A documented difference: ours refuses it (400, saying what to send); Triton takes it."""
    with client(server, protocol) as c:
        send = sender(c, protocol)
        if server.name == "triton":
            assert send("accumulate", 7, "text", True, True) == 7
            return
        caught = refused(lambda: send("accumulate", 7, "text", True, True))
    assert (caught.status(), caught.message()) == (
        status_of(protocol, 400),
        "inference request to model 'accumulate' has a string sequence id 'text', but the "
        "model's CORRID control is UINT64: send an integer",
    )


def test_the_sequence_batching_configuration(server: Peer) -> None:
    """The configuration extension shows the strategy, the idle time, the controls and the state
    as both servers were given them."""
    with client(server, "http") as c:
        direct = c.get_model_config("running_sum")["sequence_batching"]
        oldest = c.get_model_config("accumulate_oldest")["sequence_batching"]
    assert "direct" in direct
    assert direct["max_sequence_idle_microseconds"] == 60_000_000
    [state] = direct["state"]
    assert (state["input_name"], state["output_name"], state["data_type"], state["dims"]) == (
        "STATE_IN", "STATE_OUT", "TYPE_INT32", [1]
    )  # fmt: skip
    controls = [
        (i["name"], i["control"][0]["kind"], i["control"][0].get("data_type", "TYPE_INVALID"))
        for i in oldest["control_input"]
    ]
    assert controls == [
        ("START", "CONTROL_SEQUENCE_START", "TYPE_INVALID"),
        ("END", "CONTROL_SEQUENCE_END", "TYPE_INVALID"),
        ("READY", "CONTROL_SEQUENCE_READY", "TYPE_INVALID"),
        ("CORRID", "CONTROL_SEQUENCE_CORRID", "TYPE_UINT64"),
    ]
    assert oldest["oldest"]["max_candidate_sequences"] == 4
    assert oldest["oldest"]["max_queue_delay_microseconds"] == 1000
    # unset, Triton's preferred batch size is max_batch_size (a full batch): ours shows it too
    assert oldest["oldest"]["preferred_batch_size"] == [4]
