"""Triton's model-serving extensions on both servers: model warmup, ensembles (a three-step
chain) and calls from a model to models (Triton's BLS against rosettaserve's ``self.infer``)."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tests_triton.clients import PROTOCOLS, client, count, counted, infer, stats, status_of
from tests_triton.servers import Peer


def test_warmup_ran_before_the_first_request(server: Peer) -> None:
    """counter answers how many times it ran: its two warmup runs came before any client's.

    A documented difference: Triton 2.51's statistics count the warmup runs (as successes, in
    inference and execution counts); rosettaserve's count clients' requests only."""
    warmups = 2 if server.name == "triton" else 0
    assert count(server, "counter") == warmups  # (no client has asked it yet)
    answer = infer(server, "http", "counter", {"IN": np.zeros(3, np.float32)}, ["CALLS"])
    assert answer["CALLS"].tolist() == [3]
    counted(server, {"counter": warmups}, 1)
    entry = stats(server, "counter")
    assert entry["inference_count"] == entry["execution_count"] == warmups + 1
    assert entry["inference_stats"]["success"]["count"] == warmups + 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_three_step_ensemble(server: Peer, protocol: str) -> None:
    steps = ["pipeline", "scale", "add_one", "times_ten"]
    before = {model: count(server, model) for model in steps}
    x = np.array([0.5, -1.0, 3.0], np.float32)
    answer = infer(server, protocol, "pipeline", {"IN": x}, ["OUT"])["OUT"]
    assert answer.tolist() == ((x * 2 + 1) * 10).tolist()
    infer(server, protocol, "pipeline", {"IN": x[:1]}, ["OUT"])
    # the ensemble and each composing model count the calls they served
    assert counted(server, before, 2) == dict.fromkeys(steps, 2)


def test_the_ensembles_configuration_shows_its_steps(server: Peer) -> None:
    with client(server, "http") as c:
        config = c.get_model_config("pipeline")
    assert config["platform"] == "ensemble"
    steps = config["ensemble_scheduling"]["step"]
    assert [(s["model_name"], s["model_version"]) for s in steps] == [
        ("scale", -1), ("add_one", -1), ("times_ten", -1)
    ]  # fmt: skip
    assert steps[1]["input_map"] == {"X": "scaled"}
    assert steps[1]["output_map"] == {"Y": "plus_one"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_model_calls_models(server: Peer, protocol: str) -> None:
    """caller runs picky, scale and add_one through Triton's BLS or rosettaserve's self.infer:
    the same answer, and each callee counts the call it served."""
    callees = ["caller", "picky", "scale", "add_one"]
    before = {model: count(server, model) for model in callees}
    x = np.array([1.0, 2.0], np.float32)
    assert infer(server, protocol, "caller", {"INPUT": x}, ["OUT"])["OUT"].tolist() == [3.0, 5.0]
    assert counted(server, before, 1) == dict.fromkeys(callees, 1)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_callees_error_reaches_the_client_through_its_caller(server: Peer, protocol: str) -> None:
    """picky refuses negative values (a ValueError: 400 when asked directly, on both). Through
    caller its message reaches the client on both.

    Documented differences: the status through the caller is the callee's on rosettaserve (400),
    INTERNAL (500) on Triton, whose BLS response error does not keep the callee's code; and
    Triton's Python backend counts a request answered with an error as a success (the execution
    succeeded), rosettaserve as a failure."""
    x = np.array([-1.0], np.float32)
    with pytest.raises(InferenceServerException) as direct:
        infer(server, protocol, "picky", {"X": x}, ["Y"])
    assert direct.value.status() == status_of(protocol, 400)
    kind = "success" if server.name == "triton" else "fail"
    before = {model: count(server, model, kind) for model in ("caller", "picky")}
    with pytest.raises(InferenceServerException) as caught:
        infer(server, protocol, "caller", {"INPUT": x}, ["OUT"])
    assert caught.value.message() == "negative values are refused"
    assert caught.value.status() == status_of(protocol, 500 if server.name == "triton" else 400)
    assert counted(server, before, 1, kind) == {"caller": 1, "picky": 1}
