"""System shared memory against binary REST and gRPC (1 MiB and 16 MiB inputs), and a
response-cache hit against running a small identity model, on rosettaserve and on Triton
Inference Server 2.51 (nvidia-pytriton 0.7.0's binary, Python backend), side by side in one run.

Run (from ``.venv-triton``, ``make install-triton``; wrk and h2load from Debian), holding the
bench lock:

    flock /work/scratch/bench.lock .venv-triton/bin/python bench/triton_extensions.py

Both serve ``bench/triton_repository`` (written once for both, as tests_triton's): ``identity``
(FP32 [-1,-1], OUTPUT0 = INPUT0, a Python model) and ``identity_cached``, the same with the
response cache on. rosettaserve runs with ``--allow-client-shm true --cache-size 1048576
--log-level warning`` (no access log: Triton writes no line per request), Triton with
``--cache-config local,size=1048576``. Shared memory: the regions are made with
``tritonclient.utils.shared_memory`` (an input region holding the tensor and an output region
per size) and registered over REST; a shared-memory request names them (input and output), a
binary one carries the tensor in its body and gets it back in the answer (REST: the binary
tensor data extension, gRPC: ``raw_input_contents``). Cache: FP32 [1,4] over REST JSON and gRPC,
to ``identity`` (the model runs every time) and to ``identity_cached`` (every request after the
first a hit). One answer per case is checked first (the output equals the input).

The servers and their processes run on core ``--server-core``; wrk (REST) and h2load (gRPC) on
``--client-core`` with one connection, a request at a time: each case gets a 2 s warm-up, then
``--duration`` seconds ``--repeats`` times, the cases interleaved. Printed: the medians of the
repeats (p50 latency and req/s), and Triton's p50 over ours.
"""

from __future__ import annotations

import json
import os
import statistics
import struct
import tempfile
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import tritonclient.grpc.service_pb2 as pb
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from triton_side import (
    SERVERS,
    Body,
    Load,
    Measurement,
    Peer,
    arguments,
    h2load_run,
    pin_servers,
    serving,
    write_lua,
    wrk_run,
)

REPOSITORY = Path(__file__).resolve().parent / "triton_repository"
SIZES = {"1mib": 1 << 20, "16mib": 16 << 20}
CACHE_BYTES = 1 << 20
# no access log (Triton writes no line per request either; bench/compare runs ours the same way)
ROSETTASERVE_FLAGS = ("--allow-client-shm", "true", "--cache-size", str(CACHE_BYTES))
ROSETTASERVE_FLAGS += ("--log-level", "warning")
TRITON_FLAGS = ("--cache-config", f"local,size={CACHE_BYTES}")
GRPC_INFER = "/inference.GRPCInferenceService/ModelInfer"
GRPC_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
SMALL = np.array([[1.5, 2.5, 3.5, 4.5]], dtype=np.float32)


@dataclass
class Case:
    """One request, sent as it is to both servers: its body, the input it carries or names, and
    where its answer's output is (``region``: the output region's handle, else in the answer)."""

    name: str
    body: Body
    grpc: bool
    region: Any = None
    answer_size: dict[str, int] = field(default_factory=dict)  # gRPC, by server


@dataclass
class Regions:
    """The input and output regions of one size, made by tritonclient's shared_memory module."""

    label: str
    tensor: np.ndarray[Any, Any]
    handles: dict[str, Any] = field(default_factory=dict)  # region name -> handle

    @property
    def nbytes(self) -> int:
        return int(self.tensor.nbytes)

    @staticmethod
    def key(name: str) -> str:
        return f"/rsbench_{name}_{os.getpid()}"

    def make(self) -> None:
        for side in ("in", "out"):
            name = f"{side}_{self.label}"
            self.handles[name] = shm.create_shared_memory_region(name, self.key(name), self.nbytes)
        shm.set_shared_memory_region(self.handles[f"in_{self.label}"], [self.tensor])

    def register(self, peer: Peer) -> None:
        client = httpclient.InferenceServerClient(peer.http)
        for name in self.handles:
            client.register_system_shared_memory(name, self.key(name), self.nbytes)
        client.close()

    def destroy(self) -> None:
        for handle in self.handles.values():
            shm.destroy_shared_memory_region(handle)


def shm_params(region: str, nbytes: int) -> dict[str, Any]:
    return {"shared_memory_region": region, "shared_memory_byte_size": nbytes}


def rest_body(
    work: Path, name: str, head: dict[str, Any], raw: bytes = b"", model: str = "identity"
) -> Body:
    """A REST request (JSON, or a JSON header and ``raw`` bytes) and its wrk script."""
    data = json.dumps(head, separators=(",", ":")).encode()
    headers = {"Content-Type": "application/json"}
    if raw:
        headers = {"Content-Type": "application/octet-stream"}
        headers["Inference-Header-Content-Length"] = str(len(data))
    path = work / f"{name}.body"
    path.write_bytes(data + raw)
    write_lua(path.with_suffix(".lua"), path, headers)
    return Body(path, data + raw, SMALL, headers, path.with_suffix(".lua"), model)


def grpc_body(work: Path, name: str, request: Any) -> Body:
    """A gRPC ModelInfer call's frame, as h2load sends it."""
    message = request.SerializeToString()
    path = work / f"{name}.frame"
    path.write_bytes(b"\x00" + struct.pack(">I", len(message)) + message)
    headers = {"content-type": "application/grpc", "te": "trailers"}
    return Body(path, message, SMALL, headers)


def grpc_request(model: str, tensor: np.ndarray[Any, Any], region: str = "") -> Any:
    """ModelInfer for OUTPUT0 = INPUT0: the tensor in raw_input_contents, or named by region."""
    request = pb.ModelInferRequest(model_name=model)
    item = request.inputs.add(name="INPUT0", datatype="FP32", shape=list(tensor.shape))
    out = request.outputs.add(name="OUTPUT0")
    if not region:
        request.raw_input_contents.append(tensor.tobytes())
        return request
    for target, name in ((item, f"in_{region}"), (out, f"out_{region}")):
        target.parameters["shared_memory_region"].string_param = name
        target.parameters["shared_memory_byte_size"].int64_param = tensor.nbytes
    return request


def shm_cases(work: Path, regions: Regions) -> list[Case]:
    label, tensor, nbytes = regions.label, regions.tensor, regions.nbytes
    head = {"name": "INPUT0", "datatype": "FP32", "shape": list(tensor.shape)}
    binary = {
        "inputs": [{**head, "parameters": {"binary_data_size": nbytes}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }
    named = {
        "inputs": [{**head, "parameters": shm_params(f"in_{label}", nbytes)}],
        "outputs": [{"name": "OUTPUT0", "parameters": shm_params(f"out_{label}", nbytes)}],
    }
    out = regions.handles[f"out_{label}"]
    raw, by_region = grpc_request("identity", tensor), grpc_request("identity", tensor, label)
    return [
        Case(
            f"rest_binary_{label}", rest_body(work, f"rb{label}", binary, tensor.tobytes()), False
        ),
        Case(f"rest_shm_{label}", rest_body(work, f"rs{label}", named), False, out),
        Case(f"grpc_raw_{label}", grpc_body(work, f"gr{label}", raw), True),
        Case(f"grpc_shm_{label}", grpc_body(work, f"gs{label}", by_region), True, out),
    ]


def cache_cases(work: Path) -> list[Case]:
    head = {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": SMALL.ravel().tolist()}
    cases = []
    for model in ("identity", "identity_cached"):
        rest = rest_body(work, f"c{model}", {"inputs": [head]}, model=model)
        cases.append(Case(f"rest_small/{model}", rest, False))
        call = grpc_body(work, f"g{model}", grpc_request(model, SMALL))
        cases.append(Case(f"grpc_small/{model}", call, True))
    return cases


def check(peer: Peer, case: Case, tensor: np.ndarray[Any, Any]) -> None:
    """One answer: the output equals the input (in the answer, or in the output region)."""
    if case.region is not None:
        shm.set_shared_memory_region(case.region, [np.zeros_like(tensor)])
    if case.grpc:
        with grpc.insecure_channel(peer.grpc, options=GRPC_OPTIONS) as channel:
            answer = channel.unary_unary(GRPC_INFER)(case.body.data, timeout=60)
        case.answer_size[peer.name] = len(answer)
        response = pb.ModelInferResponse.FromString(answer)
        got = response.raw_output_contents[0] if response.raw_output_contents else b""
    else:
        request = urllib.request.Request(
            f"http://{peer.http}/v2/models/{case.body.model}/infer",
            data=case.body.data,
            headers=case.body.headers,
        )
        with urllib.request.urlopen(request, timeout=60) as reply:
            answer, length = reply.read(), reply.headers.get("Inference-Header-Content-Length")
        if length is not None:
            got = answer[int(length) :]
        elif case.region is None:  # JSON
            got = np.array(json.loads(answer)["outputs"][0]["data"], np.float32).tobytes()
    if case.region is not None:
        got = shm.get_contents_as_numpy(case.region, np.float32, tensor.shape).tobytes()
    assert got == tensor.tobytes(), f"{peer.name} {case.name}: wrong answer"


def run(peer: Peer, case: Case, load: Load, seconds: int, tag: str) -> Measurement:
    if case.grpc:
        url = f"http://{peer.grpc}{GRPC_INFER}"
        size = case.answer_size[peer.name]
        return h2load_run(load, url, case.body, seconds, tag, answer_size=size)
    url = f"http://{peer.http}/v2/models/{case.body.model}/infer"
    assert case.body.script is not None
    return wrk_run(load, url, case.body.script, seconds, tag)


Figures = dict[str, dict[str, tuple[float, float, int]]]  # server -> case -> (p50 µs, req/s, n)


def one_repeat(
    name: str, repeat: int, cases: list[tuple[Case, Any]], sizes: list[Regions], load: Load
) -> tuple[dict[str, Measurement], str]:
    """One start of one server: each case checked, warmed up 2 s and measured; and, if the
    server died on the way, how (the cases after it are left out of this repeat)."""
    found: dict[str, Measurement] = {}
    work = load.raw / f"r{repeat}"
    with serving(name, REPOSITORY, work, ROSETTASERVE_FLAGS, TRITON_FLAGS) as peer:
        for regions in sizes:
            regions.register(peer)
        for case, tensor in cases:
            tag = f"{name}-{case.name}-r{repeat}".replace("/", "_")
            try:
                check(peer, case, tensor)
                run(peer, case, load, 2, tag + "-warmup")
                found[case.name] = m = run(peer, case, load, load.duration, tag)
            except Exception:
                if peer.process.proc.poll() is None:
                    raise
                tail = " / ".join(line for line in peer.process.lines[-12:] if "Signal" in line)
                died = f"{name} died during {case.name}, repeat {repeat + 1} ({tail or 'exited'})"
                print(f"  {died}", flush=True)
                return found, died
            print(f"  {tag}: p50 {m.p50 * 1000:.0f} µs, {m.rps:.0f} req/s", flush=True)
        httpclient.InferenceServerClient(peer.http).unregister_system_shared_memory()
    return found, ""


def medians(runs: list[dict[str, Measurement]]) -> dict[str, tuple[float, float, int]]:
    names = dict.fromkeys(name for found in runs for name in found)
    figures = {}
    for name in names:
        ms = [found[name] for found in runs if name in found]
        p50 = statistics.median(m.p50 * 1000 for m in ms)
        figures[name] = (p50, statistics.median(m.rps for m in ms), len(ms))
    return figures


def report(results: Figures, repeats: int) -> None:
    """Medians (of fewer repeats where a server died: their number in brackets)."""
    ours, theirs = results["rosettaserve"], results["triton"]

    def cell(figures: tuple[float, float, int]) -> str:
        p50, rps, n = figures
        return f"{p50:,.0f} | {rps:,.0f}" + (f" ({n})" if n < repeats else "")

    print("\n| case | rosettaserve p50 µs | req/s | Triton p50 µs | req/s | Triton p50 / ours |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in [name for name in ours if name in theirs]:
        ratio = theirs[name][0] / ours[name][0]
        print(f"| {name} | {cell(ours[name])} | {cell(theirs[name])} | {ratio:.2f} |")
    pairs = _pairs(ours)
    if pairs:  # (none with --cache-only)
        print("\n| server | " + " | ".join(f"{n} shm / binary" for n in pairs) + " |")
        print("|---|" + "---:|" * len(pairs))
        for server, figures in results.items():
            ratios = " | ".join(_ratio(figures, *pair) for pair in pairs.values())
            print(f"| {server} | {ratios} |")
    print("\n| server | REST hit / run | gRPC hit / run |")
    print("|---|---:|---:|")
    for server, figures in results.items():
        cells = [
            _ratio(figures, f"{api}_small/identity_cached", f"{api}_small/identity")
            for api in ("rest", "grpc")
        ]
        print(f"| {server} | {cells[0]} | {cells[1]} |")


def _ratio(figures: Mapping[str, tuple[float, float, int]], a: str, b: str) -> str:
    """p50 of case ``a`` over case ``b``'s ("-" if either is missing)."""
    if a not in figures or b not in figures:
        return "-"
    return f"{figures[a][0] / figures[b][0]:.2f}"


def _pairs(figures: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Each shared-memory case and its binary counterpart, e.g. rest_1mib -> (shm, binary)."""
    pairs = {}
    for name in figures:
        if "_shm_" in name:
            api, _, label = name.split("_")
            binary = f"{api}_{'binary' if api == 'rest' else 'raw'}_{label}"
            pairs[f"{api}_{label}"] = (name, binary)
    return pairs


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument(
        "--cache-only", action="store_true", help="only the response cache's small cases"
    )
    args = parser.parse_args()
    pin_servers(args.server_core)
    rng = np.random.default_rng(20261129)
    sizes = [
        Regions(label, rng.standard_normal((1, n // 4), np.float32))
        for label, n in ({} if args.cache_only else SIZES).items()
    ]
    deaths: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        load = Load(args.client_core, args.duration, 0, work)
        cases: list[tuple[Case, Any]] = []
        try:
            for regions in sizes:
                regions.make()
                cases += [(case, regions.tensor) for case in shm_cases(work, regions)]
            cases += [(case, SMALL) for case in cache_cases(work)]
            runs: dict[str, list[dict[str, Measurement]]] = {name: [] for name in SERVERS}
            for repeat in range(args.repeats):
                for name in SERVERS:
                    print(f"{name}, repeat {repeat + 1}:", flush=True)
                    found, died = one_repeat(name, repeat, cases, sizes, load)
                    runs[name].append(found)
                    deaths += [died] if died else []
        finally:
            for regions in sizes:
                regions.destroy()
    report({name: medians(found) for name, found in runs.items()}, args.repeats)
    for died in deaths:
        print(f"\n{died}")


if __name__ == "__main__":
    main()
