"""``isolation: process``: each worker's handler in a process of its own, as TorchServe runs
its workers. Answers, streams and batches are those of the handler in the server's process; a
process that dies fails its batch (503) and is started again."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.serverproc import start_server, stop_cleanly

MODEL_YAML = "runtime: torchserve\nisolation: process\nparameters: {{workers: {}}}\n"
WORKERS = {"echo": 2, "stream": 2, "batch": 1}  # (two workers would split a batch between them)


def test_handlers_in_worker_processes(store: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    for name, workers in WORKERS.items():
        (repo / name / "1").mkdir(parents=True)
        shutil.copyfile(store / f"{name}.mar", repo / name / "1" / "model.mar")
        (repo / name / "model.yaml").write_text(MODEL_YAML.format(workers))
    server = start_server(repo)
    try:
        with httpx.Client(base_url=server.http_url, timeout=120) as client:
            assert_answers(client, server.proc.pid)
            assert_a_dead_process_is_replaced(client)
    finally:
        stop_cleanly(server)


def assert_answers(client: httpx.Client, server_pid: int) -> None:
    r = client.post("/predictions/echo", json={"a": 1}, headers={"x-trace": "t1"})
    assert r.status_code == 200, r.text
    assert (r.json()["value"], r.json()["x_trace"]) == ({"a": 1}, "t1")
    assert client.post("/predictions/echo", json={"do": "pid"}).json() != server_pid
    r = client.post("/predictions/echo", json={"do": "status"})
    assert r.status_code == 418
    with client.stream("POST", "/predictions/stream", content=b"x") as r:
        body = b"".join(r.iter_raw()).decode()
    assert body == "".join(f"part {i} of request 0;" for i in range(3)) + "end"

    def send(i: int) -> dict:
        return json.loads(client.post("/predictions/batch", json={"i": i}).text)

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(send, range(4)))
    assert {a["batch"] for a in answers} == {4}


def assert_a_dead_process_is_replaced(client: httpx.Client) -> None:
    r = client.post("/predictions/echo", json={"do": "exit"})
    assert (r.status_code, r.json()["message"]) == (503, "Prediction failed")
    for _ in range(4):  # every worker answers again
        assert client.post("/predictions/echo", json={"a": 2}).status_code == 200
