"""Many models, one memory budget: versions that load on their first request (once, however many
requests come at once), unload when idle and load again, and share --memory-budget (the least
recently used idle version makes room, one with a request in flight never does, one larger than
the whole budget fails its load saying so), with their state and measured memory in the
repository index, /metrics and the status page."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from prometheus_client.parser import text_string_to_metric_families

from tests.serverproc import ServerProcess, inflight, served, start_server, wait_for

MIB = 1 << 20
MODEL = """
import time
from pathlib import Path

import numpy as np
from rosettaserve import Model


class Holder(Model):
    def load(self):
        p = self.config["parameters"]
        with open(p["log"], "a") as f:  # one line per load: the test counts them
            f.write("load\\n")
        while p.get("load_gate") and not Path(p["load_gate"]).exists():
            time.sleep(0.02)  # held until the test opens the gate
        self.weights = np.ones(p["mib"] << 18, dtype=np.float32)  # mib MiB, touched

    def predict(self, inputs):
        gate = self.config["parameters"].get("gate")
        while gate and not Path(gate).exists():
            time.sleep(0.02)
        return {"Y": inputs["X"] + self.weights[0]}
"""


def add_model(repo: Path, name: str, mib: int, extra: str = "", **params: str) -> Path:
    """A python model that holds ``mib`` MiB once loaded; its loads are lines of the returned
    file."""
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(MODEL)
    log = repo.parent / f"{name}.loads"
    log.touch()
    settings = ", ".join(f"{k}: '{v}'" for k, v in {"log": str(log), **params}.items())
    (folder / "model.yaml").write_text(
        f"runtime: python\ninstances: 1\nparameters: {{mib: {mib}, {settings}}}\n"
        "inputs: [{name: X, datatype: FP32, shape: [-1]}]\n"
        f"outputs: [{{name: Y, datatype: FP32, shape: [-1]}}]\n{extra}"
    )
    return log


def loads(log: Path) -> int:
    return len(log.read_text().splitlines())


def infer(server: ServerProcess, model: str) -> np.ndarray:
    client = triton.InferenceServerClient(server.http_hostport, network_timeout=300)
    x = triton.InferInput("X", [2], "FP32")
    x.set_data_from_numpy(np.array([1.0, 2.0], dtype=np.float32))
    result = client.infer(model, [x])
    return result.as_numpy("Y")


def index(server: ServerProcess) -> dict[str, dict[str, Any]]:
    client = triton.InferenceServerClient(server.http_hostport)
    return {row["name"]: row for row in client.get_model_repository_index()}


def resident_metric(server: ServerProcess) -> dict[str, float]:
    text = httpx.get(server.http_url + "/metrics", timeout=30).text
    return {
        sample.labels["model"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "rosettaserve_model_resident_bytes"
        for sample in family.samples
    }


@pytest.fixture
def lazy(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path, Path]]:
    repo = tmp_path / "repo"
    gate = tmp_path / "load-gate"
    log = add_model(repo, "lazy", 16, "load: lazy\n", load_gate=str(gate))
    # ready at once: the server does not wait for a version that loads on demand
    for server in served(start_server(repo, "--enable-model-control")):
        yield server, log, gate


def test_a_lazy_version_loads_once_on_its_first_requests(
    lazy: tuple[ServerProcess, Path, Path],
) -> None:
    server, log, gate = lazy
    client = triton.InferenceServerClient(server.http_hostport)
    assert client.is_server_ready()
    assert not client.is_model_ready("lazy")  # honest: not loaded yet
    row = index(server)["lazy"]
    assert (row["state"], row["reason"], row["resident_bytes"]) == ("UNLOADED", "lazy", 0)
    assert loads(log) == 0
    answers: list[list[float]] = []
    clients = [
        threading.Thread(target=lambda: answers.append(infer(server, "lazy").tolist()))
        for _ in range(4)
    ]
    for c in clients:
        c.start()
    wait_for(lambda: loads(log) == 1, timeout=60)  # its load started, and is held
    wait_for(lambda: index(server)["lazy"]["state"] == "LOADING")
    assert client.is_server_ready()  # nor for one that loads for a request
    assert not client.is_model_ready("lazy")
    gate.touch()
    for c in clients:
        c.join(120)
    assert answers == [[2.0, 3.0]] * 4
    assert loads(log) == 1  # four concurrent first requests, one load
    assert client.is_model_ready("lazy")
    row = index(server)["lazy"]
    assert row["state"] == "READY"
    assert row["resident_bytes"] >= 15 * MIB  # measured: it holds 16 MiB of weights
    assert resident_metric(server)["lazy"] == row["resident_bytes"]
    page = httpx.get(server.http_url + "/status.json", timeout=10).json()
    shown = [m["resident_bytes"] for m in page["models"] if m["name"] == "lazy"]
    assert shown == [row["resident_bytes"]]
    client.unload_model("lazy")
    client.load_model("lazy")  # asked for by name: it loads now, lazy or not
    assert client.is_model_ready("lazy")
    assert loads(log) == 2


def test_an_idle_version_is_unloaded_and_loads_again(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    log = add_model(repo, "idler", 16, "unload_after_idle: 0.3\n")
    proc = start_server(repo, "--enable-model-control")
    try:
        assert loads(log) == 1  # eager: loaded at start
        wait_for(lambda: index(proc)["idler"]["state"] == "UNLOADED", timeout=60)
        row = index(proc)["idler"]
        assert (row["reason"], row["resident_bytes"]) == ("idle", 0)
        assert resident_metric(proc)["idler"] == 0
        before = loads(log)
        assert infer(proc, "idler").tolist() == [2.0, 3.0]  # loaded again for it
        assert loads(log) == before + 1
        assert any("(idle)" in line for line in proc.lines)
        wait_for(lambda: index(proc)["idler"]["state"] == "UNLOADED", timeout=60)
        tensor = {"name": "X", "dtype": "DT_FLOAT32", "shape": [2], "flat_float32": [1.0, 2.0]}
        grps = httpx.post(  # grps's API waits for the load too
            f"{proc.http_url}/grps/v1/infer/predict?model=idler",
            json={"gtensors": {"tensors": [tensor]}},
            timeout=60,
        )
        assert grps.status_code == 200, grps.text
        assert grps.json()["gtensors"]["tensors"][0]["flat_float32"] == [2.0, 3.0]
        assert loads(log) == before + 2
        wait_for(lambda: index(proc)["idler"]["state"] == "UNLOADED", timeout=60)
        streamed = httpx.post(  # and its streaming predict
            f"{proc.http_url}/grps/v1/infer/predict?model=idler&streaming=true",
            json={"gtensors": {"tensors": [tensor]}},
            timeout=60,
        )
        assert streamed.status_code == 200, streamed.text
        line = json.loads(streamed.text.splitlines()[0])
        assert line["gtensors"]["tensors"][0]["flat_float32"] == [2.0, 3.0]
        assert loads(log) == before + 3
    finally:
        proc.stop()


def test_the_budget_evicts_the_least_recently_used_idle_version(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    gate = tmp_path / "gate"
    logs = {n: add_model(repo, n, 64, "load: lazy\n") for n in ("a", "b", "c")}
    add_model(repo, "busy", 64, "load: lazy\n", gate=str(gate))
    add_model(repo, "huge", 256, "load: lazy\n")
    proc = start_server(repo, "--enable-model-control", "--memory-budget", "160MiB")
    try:
        for name in ("a", "b"):
            infer(proc, name)
        states = index(proc)
        assert [states[n]["state"] for n in ("a", "b", "c")] == ["READY", "READY", "UNLOADED"]
        infer(proc, "c")  # two fit, not three: a, used least recently, makes room
        states = index(proc)
        assert (states["a"]["state"], states["a"]["reason"]) == ("UNLOADED", "evicted")
        assert [states[n]["state"] for n in ("b", "c")] == ["READY", "READY"]
        assert resident_metric(proc)["a"] == 0

        # a version with a request in flight is never evicted: c (idle) goes, busy stays
        held: list[list[float]] = []
        client = threading.Thread(target=lambda: held.append(infer(proc, "busy").tolist()))
        client.start()  # busy loads (b, the least recently used, makes room), then is held
        wait_for(lambda: inflight(proc, "busy") == 1, timeout=60)
        infer(proc, "a")
        states = index(proc)
        assert states["busy"]["state"] == "READY"
        assert [states[n]["reason"] for n in ("b", "c")] == ["evicted", "evicted"]
        gate.touch()
        client.join(120)
        assert held == [[2.0, 3.0]]
        assert loads(logs["a"]) == 2

        # larger than the whole budget: its load fails saying so, and evicts nothing
        with pytest.raises(triton.InferenceServerException) as failed:
            infer(proc, "huge")
        assert "more than the whole memory budget" in str(failed.value)
        row = index(proc)["huge"]
        assert row["state"] == "UNAVAILABLE"
        assert "--memory-budget" in row["reason"]
        assert [index(proc)[n]["state"] for n in ("a", "busy")] == ["READY", "READY"]
    finally:
        proc.stop()


def test_a_load_longer_than_the_load_timeout_answers_503_and_goes_on(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    gate = tmp_path / "load-gate"
    log = add_model(repo, "slow", 16, "load: lazy\n", load_gate=str(gate))
    add_model(repo, "apart", 16, "isolation: process\n")  # measured: its worker's memory
    proc = start_server(repo, "--enable-model-control", "--load-timeout", "0.2")
    try:
        answer = httpx.post(
            f"{proc.http_url}/v2/models/slow/infer",
            json={"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1.0]}]},
            timeout=60,
        )
        assert answer.status_code == 503
        assert "still loading after 0.2 s (--load-timeout)" in answer.json()["error"]
        gate.touch()  # the load went on without the request
        wait_for(lambda: index(proc)["slow"]["state"] == "READY", timeout=60)
        assert infer(proc, "slow").tolist() == [2.0, 3.0]
        assert loads(log) == 1
        assert index(proc)["apart"]["resident_bytes"] >= 16 * MIB
    finally:
        proc.stop()
