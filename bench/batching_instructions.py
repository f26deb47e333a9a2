"""What one batched OIP REST request costs the server in instructions (callgrind), model aside.

    .venv/bin/python bench/batching_instructions.py [--requests 300] [--keep FILE]

bench/compare's batching case without ONNX Runtime: the same JSON body (bench/batching_mlp.py's
one row of 128 features, as a Python client writes them: 17 digits each), 32 connections a round
of the loop, max_batch_size 32, max_queue_delay 0; the model is a python one that answers the
first 16 columns of its input (a cost of a few numpy calls a batch, the same for every tree).
It runs bench/rest_path_instructions.py on that repository: instructions per request, the
batcher, JSON parsing and the answers included.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

MODEL_YAML = """\
runtime: python
class: Head
max_batch_size: 32
dynamic_batching: {max_queue_delay_microseconds: 0}
inputs:
  - {name: INPUT0, datatype: FP32, shape: [-1, 128]}
outputs:
  - {name: OUTPUT0, datatype: FP32, shape: [-1, 16]}
"""

MODEL_PY = """\
import numpy as np

from rosettaserve import Model


class Head(Model):
    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"OUTPUT0": inputs["INPUT0"][:, :16]}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="rounds of 32 requests")
    parser.add_argument("--keep", help="keep the callgrind output in this file")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import batching_mlp

    body, _ = batching_mlp.request_body(batching_mlp.build_parser().parse_args([]))
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "repo" / "head"
        model.mkdir(parents=True)
        (model / "model.yaml").write_text(MODEL_YAML)
        (model / "model.py").write_text(MODEL_PY)
        (Path(tmp) / "body.json").write_bytes(body)
        argv = [sys.executable, str(HERE / "rest_path_instructions.py"), str(model.parent)]
        argv += ["--model", "head", "--connections", "32", "--requests", str(args.requests)]
        argv += ["--body", str(Path(tmp) / "body.json")]
        argv += ["--keep", args.keep] if args.keep else []
        subprocess.run(argv, check=True)


if __name__ == "__main__":
    main()
