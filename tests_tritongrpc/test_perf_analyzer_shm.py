"""Triton's load generator, ``perf_analyzer --shared-memory system``, against a real server over
REST and gRPC: it registers its regions, sends its inputs through them and reads its outputs
from them, then unregisters every region (system and CUDA); each step must succeed. A brief run
(a few windows of 20 requests, any spread taken as stable): no timing is asserted.

perf_analyzer comes from ``bash bench/setup_perf_analyzer.sh`` (``make perf-analyzer``: PyPI's
tritonclient 2.50 wheel and Debian's libb64, into bench/.tools/)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from tests.serverproc import ServerProcess, served, start_server
from tests.shm_support import make_repo

PERF_ANALYZER = Path(__file__).resolve().parents[1] / "bench" / ".tools" / "perf_analyzer"
# what perf_analyzer prints when a step fails while it still exits 0 (its clean-up at the end)
FAILURE = re.compile(r"error|unable|failed", re.IGNORECASE)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = make_repo(tmp_path_factory.mktemp("pa_repo"))
    yield from served(start_server(repo, "--allow-client-shm=true"))


def successes(server: ServerProcess) -> int:
    client = httpclient.InferenceServerClient(server.http_hostport)
    stats = client.get_inference_statistics("simple")["model_stats"][0]
    client.close()
    return int(stats["inference_stats"]["success"]["count"])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_runs_through_system_shared_memory(
    server: ServerProcess, protocol: str
) -> None:
    assert PERF_ANALYZER.exists(), "run `bash bench/setup_perf_analyzer.sh` (make perf-analyzer)"
    url = server.http_hostport if protocol == "http" else server.grpc_address
    before = successes(server)
    cmd = [str(PERF_ANALYZER), "-m", "simple", "-i", protocol, "-u", url]
    cmd += ["--shape", "INPUT0:1,16", "--shape", "INPUT1:1,16"]
    cmd += ["--shared-memory", "system", "--output-shared-memory-size", "64"]
    cmd += ["--measurement-mode", "count_windows", "--measurement-request-count", "20"]
    cmd += ["--stability-percentage", "1000", "--max-trials", "3"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert FAILURE.search(output) is None, output
    assert successes(server) >= before + 20  # its requests were served
    client = httpclient.InferenceServerClient(server.http_hostport)
    assert client.get_system_shared_memory_status() == []  # and its regions unregistered
    client.close()
