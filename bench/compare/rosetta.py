"""rosettaserve's side of the comparison: its ServerSpec and the repositories it serves.

- ``identity``: a python model returning its input (FP32 [-1,-1]), the model every server serves,
  and ``identity_bytes``, the same for BYTES (the string case);
- the tensor examples: ``examples/models`` symlinked without the LLM models (startup time);
- the batching MLP of ``bench/batching_mlp.py``, unbatched and batched (dynamic batching).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import tls_cert
import yaml
from spec import CASES, REST_BYTES, TLS_CASES, ServerSpec

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "bench" / ".venvs" / "rosettaserve" / "bin"  # `make serve`'s install (see run)

IDENTITY_YAML = """\
runtime: python
class: Identity
inputs:
  - {name: INPUT0, datatype: FP32, shape: [-1, -1]}
outputs:
  - {name: OUTPUT0, datatype: FP32, shape: [-1, -1]}
"""

IDENTITY_BYTES_YAML = IDENTITY_YAML.replace("FP32", "BYTES")

IDENTITY_PY = """\
import numpy as np

from rosettaserve import Model


class Identity(Model):
    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"OUTPUT0": inputs["INPUT0"]}
"""


def serve_argv(repo: Path) -> tuple[str, ...]:
    return (
        str(BIN / "rosettaserve"),
        "serve",
        str(repo),
        "--http-port",
        "{http_port}",
        "--grpc-port",
        "{grpc_port}",
        "--log-level",
        "warning",
    )


def identity_repo(root: Path) -> Path:
    repo = root / "rosetta_identity"
    for name, config in (("identity", IDENTITY_YAML), ("identity_bytes", IDENTITY_BYTES_YAML)):
        (repo / name).mkdir(parents=True, exist_ok=True)
        (repo / name / "model.yaml").write_text(config)
        (repo / name / "model.py").write_text(IDENTITY_PY)
    return repo


def rosetta_spec(root: Path) -> ServerSpec:
    """rosettaserve serving the identity model from a repository made under ``root``."""
    return ServerSpec(
        name="rosettaserve",
        key="rosettaserve",
        argv=serve_argv(identity_repo(root)),
        models={REST_BYTES: "identity_bytes"},
        cases=frozenset(CASES),
        notes=(
            "rosettaserve: one process, python runtime `identity` model (`identity_bytes` for "
            "BYTES), --log-level warning."
        ),
    )


def rosetta_tls_spec(root: Path) -> ServerSpec:
    """The same server with TLS on both ports: the small cases over HTTPS and gRPC over TLS."""
    cert, key = tls_cert.certificate()
    return ServerSpec(
        name="rosettaserve, TLS",
        key="rosettaserve_tls",
        argv=(*serve_argv(identity_repo(root)), "--tls-cert", str(cert), "--tls-key", str(key)),
        cases=frozenset(TLS_CASES),
        tls=True,
        notes="rosettaserve with --tls-cert/--tls-key (ECDSA P-256, self-signed), no API key.",
    )


def examples_repo(root: Path) -> tuple[Path, list[str]]:
    """examples/models as symlinks, without the LLM models; returns (repo, model names)."""
    repo = root / "rosetta_examples"
    repo.mkdir(parents=True, exist_ok=True)
    names = []
    for model in sorted((ROOT / "examples" / "models").iterdir()):
        config = model / "model.yaml"
        if not config.is_file():
            continue
        runtime = (yaml.safe_load(config.read_text()) or {}).get("runtime")
        if runtime == "llm" or model.name == "tiny_llama":
            continue
        link = repo / model.name
        if not link.exists():
            link.symlink_to(model, target_is_directory=True)
        names.append(model.name)
    return repo, names


def examples_spec(root: Path) -> ServerSpec:
    repo, names = examples_repo(root)
    return ServerSpec(
        name="rosettaserve (tensor examples)",
        key="rosettaserve-examples",
        argv=serve_argv(repo),
        cases=frozenset(),
        notes="examples/models without LLM models: " + ", ".join(names),
    )


BATCHING_MODELS = ("mlp_unbatched", "mlp_batched")
BATCHING_ROWS = (1, 32)  # batch sizes bench/ort_alone.py times ONNX Runtime alone at


def batching_repo(root: Path) -> Path:
    return root / "rosetta_batching"


def ort_alone(root: Path, cpu: int) -> dict[int, float]:
    """bench/ort_alone.py on the batching MLP in rosettaserve's serving venv, pinned to ``cpu``:
    ONNX Runtime's microseconds per row at each of BATCHING_ROWS, with no server."""
    model = batching_repo(root) / BATCHING_MODELS[1]
    rows = [str(n) for n in BATCHING_ROWS]
    argv = ["taskset", "-c", str(cpu), str(BIN / "python"), str(ROOT / "bench" / "ort_alone.py")]
    out = subprocess.run(
        [*argv, str(model), "--rows", *rows], check=True, capture_output=True, text=True
    ).stdout
    return {int(n): float(us) for n, us in json.loads(out)["rows"].items()}


def batching_setup(root: Path) -> tuple[ServerSpec, bytes, dict[str, str], str]:
    """rosettaserve serving bench/batching_mlp.py's MLP twice (its defaults) and its JSON body.

    Returns (spec, request body, request headers, description of the model).
    """
    sys.path.insert(0, str(ROOT / "bench"))
    import batching_mlp

    args = batching_mlp.build_parser().parse_args([])
    repo = batching_repo(root)
    if not repo.exists():
        batching_mlp.make_repo(repo, args)
    body, headers = batching_mlp.request_body(args)
    hidden = "->".join([str(args.hidden)] * args.layers)
    what = (
        f"ONNX MLP {args.inputs}->{hidden}->16 FP32 (bench/batching_mlp.py defaults), one row "
        f"per request, OIP REST JSON; max_batch_size 32, dynamic_batching "
        f"max_queue_delay {args.delay_us} us; ONNX Runtime 1 intra-op thread"
    )
    spec = ServerSpec(
        name="rosettaserve (batching MLP)",
        key="rosettaserve-batching",
        argv=serve_argv(repo),
        cases=frozenset(),
    )
    return spec, body, headers, what
