"""``runtime: vllm`` when idle on this machine's vLLM (the CPU build, which has no sleep mode):
vLLM's own platform check says so, and an idle version unloads (reason ``idle``, not asleep) and
loads again on its next request, as other models do. (Where vLLM has sleep mode the version
sleeps instead: tests/unit/test_vllm_sleep.py and test_sleep_on_demand.py, with stand-ins.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import serverproc
from tests.serverproc import ServerProcess, served, start_server, wait_for
from tests_vllm.conftest import MODEL, MODEL_YAML, START_TIMEOUT_S, model_folder


def test_vllms_cpu_platform_has_no_sleep_mode() -> None:
    from rosettaserve.runtimes.vllm.sleep import sleep_mode_available

    assert sleep_mode_available() is False


def row(server: ServerProcess) -> dict[str, Any]:
    rows = httpx.post(server.http_url + "/v2/repository/index", json={}, timeout=30).json()
    return next(dict(r) for r in rows if r["name"] == MODEL)


def completes(server: ServerProcess) -> bool:
    doc = {"model": MODEL, "prompt": "hi", "max_tokens": 2, "temperature": 0}
    answer = httpx.post(server.http_url + "/v1/completions", json=doc, timeout=START_TIMEOUT_S)
    return bool(answer.json()["choices"][0]["text"])


def loaded_on_demand(server: ServerProcess) -> int:
    return sum(f"loaded model {MODEL} version 1 on demand" in line for line in server.lines)


def test_an_idle_version_unloads_here_and_its_next_request_loads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_folder(tmp_path, model_yaml=MODEL_YAML + "load: lazy\nunload_after_idle: 0\n")
    monkeypatch.setattr(serverproc, "START_TIMEOUT_S", START_TIMEOUT_S)
    server = start_server(tmp_path, "--enable-model-control")
    for _ in served(server):
        assert completes(server)
        wait_for(lambda: row(server)["state"] == "UNLOADED", timeout=START_TIMEOUT_S)
        unloaded = row(server)
        assert (unloaded["reason"], unloaded["resident_bytes"]) == ("idle", 0)
        assert "asleep" not in unloaded
        assert completes(server)
        assert loaded_on_demand(server) == 2
