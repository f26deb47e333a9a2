"""Ensembles (``runtime: ensemble``) and calls from a Python model to another (Triton's BLS),
with tritonclient against a real server: a four-step ensemble that fans out and in, each
composing model's statistics counting the calls it served, a failing step's error reaching the
client with its message, the ensemble's timeout ending its steps, graphs that cannot run refused
at load; ``self.infer`` and ``await self.infer_async`` from a model, and a callee's error raised
in the caller. (Over gRPC: tests_tritongrpc/test_triton_extensions_grpc.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.serverproc import ServerProcess, served, start_server, wait_for

ARITHMETIC = """
import time
import numpy as np
from rosettaserve import Model


class Scale(Model):
    def predict(self, inputs):
        return {"SCALED": inputs["INPUT"] * 2}


class AddOne(Model):
    def predict(self, inputs):
        return {"Y": inputs["X"] + 1}


class TimesTen(Model):
    def predict(self, inputs):
        return {"Y": inputs["X"] * 10}


class Join(Model):
    def predict(self, inputs):
        return {"SUM": inputs["A"] + inputs["B"]}


class Picky(Model):
    def predict(self, inputs):
        if (inputs["X"] < 0).any():
            raise ValueError("negative values are refused")
        return {"Y": inputs["X"]}


class Slow(Model):
    def predict(self, inputs):
        time.sleep(3)
        return {"Y": inputs["X"]}
"""
BLS = """
import numpy as np
from rosettaserve import Model


class SyncCaller(Model):
    def predict(self, inputs):
        scaled = self.infer("scale", {"INPUT": inputs["INPUT"]})["SCALED"]
        return {"OUT": self.infer("add_one", {"X": scaled}, version="1")["Y"]}


class AsyncCaller(Model):
    async def predict(self, inputs):
        scaled = (await self.infer_async("scale", {"INPUT": inputs["INPUT"]}))["SCALED"]
        return {"OUT": (await self.infer_async("times_ten", {"X": scaled}))["Y"]}


class Catcher(Model):
    def predict(self, inputs):
        try:
            self.infer("picky", {"X": inputs["INPUT"]})
        except Exception as exc:
            return {"OUT": np.array([str(exc).encode()], dtype=object)}
        return {"OUT": np.array([b"no error"], dtype=object)}
"""
FP32 = "datatype: FP32, shape: [-1]"
SIMPLE = {  # name: (module, class, inputs, outputs)
    "scale": ("arithmetic", "Scale", ["INPUT"], ["SCALED"]),
    "add_one": ("arithmetic", "AddOne", ["X"], ["Y"]),
    "times_ten": ("arithmetic", "TimesTen", ["X"], ["Y"]),
    "join": ("arithmetic", "Join", ["A", "B"], ["SUM"]),
    "picky": ("arithmetic", "Picky", ["X"], ["Y"]),
    "slow": ("arithmetic", "Slow", ["X"], ["Y"]),
    "sync_caller": ("bls", "SyncCaller", ["INPUT"], ["OUT"]),
    "async_caller": ("bls", "AsyncCaller", ["INPUT"], ["OUT"]),
}
PIPELINE = """\
runtime: ensemble
inputs: [{name: IN, datatype: FP32, shape: [-1]}]
outputs: [{name: OUT, datatype: FP32, shape: [-1]}]
steps:
  - {model_name: scale, input_map: {INPUT: IN}, output_map: {SCALED: s}}
  - {model_name: add_one, model_version: 1, input_map: {X: s}, output_map: {Y: l}}
  - {model_name: times_ten, input_map: {X: s}, output_map: {Y: r}}
  - {model_name: join, input_map: {A: l, B: r}, output_map: {SUM: OUT}}
"""
TWO_STEPS = """\
runtime: ensemble
inputs: [{name: IN, datatype: FP32, shape: [-1]}]
outputs: [{name: OUT, datatype: FP32, shape: [-1]}]
steps:
  - {model_name: scale, input_map: {INPUT: IN}, output_map: {SCALED: s}}
  - {model_name: %s, input_map: {X: s}, output_map: {Y: OUT}}
"""
BROKEN = {
    "cycle": (
        "  - {model_name: add_one, input_map: {X: b}, output_map: {Y: a}}\n"
        "  - {model_name: add_one, input_map: {X: a}, output_map: {Y: b}}\n"
        "  - {model_name: add_one, input_map: {X: IN}, output_map: {Y: OUT}}\n",
        "wait for each other's outputs (a cycle)",
    ),
    "stray": (
        "  - {model_name: add_one, input_map: {X: nowhere}, output_map: {Y: OUT}}\n",
        "reads 'nowhere', which is neither an ensemble input nor a step's output",
    ),
    "unwritten": (
        "  - {model_name: add_one, input_map: {X: IN}, output_map: {Y: other}}\n",
        "no step writes the ensemble output(s) OUT",
    ),
}


def tensor(name: str) -> str:
    return f"{{name: {name}, {FP32}}}"


def build_repository(repo: Path) -> None:
    """The models of these tests (also served to tests_tritongrpc's gRPC tests)."""
    for name, (module, cls, ins, outs) in SIMPLE.items():
        folder = repo / name
        (folder / "1").mkdir(parents=True)
        (folder / "1" / "model.py").write_text(ARITHMETIC if module == "arithmetic" else BLS)
        signature = f"inputs: [{', '.join(map(tensor, ins))}]\n"
        signature += f"outputs: [{', '.join(map(tensor, outs))}]\n"
        (folder / "model.yaml").write_text(f"runtime: python\nclass: {cls}\n{signature}")
    catcher = repo / "catcher"
    (catcher / "1").mkdir(parents=True)
    (catcher / "1" / "model.py").write_text(BLS)
    (catcher / "model.yaml").write_text(
        f"runtime: python\nclass: Catcher\ninputs: [{tensor('INPUT')}]\n"
        "outputs: [{name: OUT, datatype: BYTES, shape: [1]}]\n"
    )
    ensembles = {"pipeline": PIPELINE, "through_picky": TWO_STEPS % "picky"}
    ensembles |= {"through_slow": TWO_STEPS % "slow", "through_nothing": TWO_STEPS % "nothing"}
    head = TWO_STEPS.split("steps:", maxsplit=1)[0] + "steps:\n"
    ensembles |= {name: head + steps for name, (steps, _) in BROKEN.items()}
    for name, text in ensembles.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "model.yaml").write_text(text)


def started(repo: Path) -> ServerProcess:
    server = start_server(repo, wait_ready=False)  # (the broken graphs never get ready)
    wait_for(lambda: any("models," in line and "versions:" in line for line in server.lines))
    return server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("ensembles")
    build_repository(repo)
    yield from served(started(repo))


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(server.http_url.removeprefix("http://")) as c:
        yield c


def run(
    client: httpclient.InferenceServerClient, model: str, values: list[float], name: str = "IN"
) -> np.ndarray:
    given = httpclient.InferInput(name, [len(values)], "FP32")
    given.set_data_from_numpy(np.array(values, np.float32))
    answer: np.ndarray | None = client.infer(model, [given]).as_numpy("OUT")
    assert answer is not None
    return answer


def count(client: httpclient.InferenceServerClient, model: str) -> int:
    stats = client.get_inference_statistics(model)["model_stats"][0]
    return int(stats["inference_stats"]["success"]["count"])


def test_a_fan_out_fan_in_ensemble_answers_its_steps_composed(
    client: httpclient.InferenceServerClient,
) -> None:
    x = np.array([0.5, -1.0, 3.0], np.float32)
    assert run(client, "pipeline", x.tolist()).tolist() == ((2 * x + 1) + (2 * x) * 10).tolist()


def test_each_composing_model_counts_the_calls_it_served(
    client: httpclient.InferenceServerClient,
) -> None:
    models = ["pipeline", "scale", "add_one", "times_ten", "join"]
    before = {m: count(client, m) for m in models}
    run(client, "pipeline", [1.0])
    run(client, "pipeline", [2.0, 3.0])
    assert {m: count(client, m) - before[m] for m in models} == dict.fromkeys(models, 2)


def test_a_failing_step_fails_the_request_with_its_error(
    client: httpclient.InferenceServerClient,
) -> None:
    assert run(client, "through_picky", [1.0]).tolist() == [2.0]
    with pytest.raises(InferenceServerException) as caught:
        run(client, "through_picky", [-1.0])
    assert caught.value.status() == "400"
    assert "negative values are refused" in caught.value.message()
    with pytest.raises(InferenceServerException) as missing:
        run(client, "through_nothing", [1.0])
    assert missing.value.status() == "404"
    assert "nothing" in missing.value.message()


def test_the_ensembles_timeout_ends_its_steps(server: ServerProcess) -> None:
    body = {
        "inputs": [{"name": "IN", "datatype": "FP32", "shape": [1], "data": [1.0]}],
        "parameters": {"timeout": 200_000},
    }
    reply = httpx.post(f"{server.http_url}/v2/models/through_slow/infer", json=body, timeout=30)
    assert reply.status_code == 504, reply.text
    assert "through_slow" in reply.json()["error"]


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_graph_that_cannot_run_fails_its_load_saying_why(
    server: ServerProcess, name: str
) -> None:
    meta = httpx.get(f"{server.http_url}/v2/models/{name}", timeout=10).json()
    assert meta["properties"]["state"] == "UNAVAILABLE"
    assert BROKEN[name][1] in meta["properties"]["reason"]


def test_a_model_calls_models_from_sync_and_async_predict(
    client: httpclient.InferenceServerClient,
) -> None:
    before = count(client, "scale")
    assert run(client, "sync_caller", [1.0, 2.0], "INPUT").tolist() == [3.0, 5.0]
    assert run(client, "async_caller", [1.0, 2.0], "INPUT").tolist() == [20.0, 40.0]
    assert count(client, "scale") == before + 2
    for _ in range(30):  # fast calls: a model that calls models still never runs on the loop
        assert run(client, "sync_caller", [0.0], "INPUT").tolist() == [1.0]


def test_a_callees_error_raises_in_the_caller_with_its_message(
    client: httpclient.InferenceServerClient,
) -> None:
    given = httpclient.InferInput("INPUT", [1], "FP32")
    given.set_data_from_numpy(np.array([-5.0], np.float32))
    answer = client.infer("catcher", [given]).as_numpy("OUT")
    assert answer is not None
    assert answer[0] == b"negative values are refused"


def test_a_config_mistake_is_named(tmp_path: Path) -> None:
    from rosettaserve.repository.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match="runtime ensemble needs 'steps'"):
        parse_config({"runtime": "ensemble"})
    with pytest.raises(ConfigError, match="'steps' are for runtime ensemble"):
        parse_config(
            {"runtime": "python", "steps": [{"model_name": "a", "input_map": {}, "output_map": {}}]}
        )


def test_the_model_configuration_shows_the_steps(client: httpclient.InferenceServerClient) -> None:
    config = client.get_model_config("pipeline")
    assert config["platform"] == "ensemble"
    steps = config["ensemble_scheduling"]["step"]
    assert [(s["model_name"], s["model_version"]) for s in steps] == [
        ("scale", -1), ("add_one", 1), ("times_ten", -1), ("join", -1)
    ]  # fmt: skip
    assert steps[3]["input_map"] == {"A": "l", "B": "r"}
