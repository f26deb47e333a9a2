"""Build the example models' weight files from fixed seeds (nothing is downloaded).

    python examples/build_examples.py            # every example
    python examples/build_examples.py sklearn    # only the scikit-learn one (no onnx needed)

The ONNX file is committed (building it needs the `onnx` package, in the dev extra);
the joblib file is built by `make` because a pickle is tied to the scikit-learn version.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

MODELS = Path(__file__).resolve().parent / "models"
SEED = 20261121


def build_onnx_mlp(out: Path) -> None:
    """A 4 -> 8 -> 3 MLP with ReLU: INPUT0 FP32[-1,4] -> OUTPUT0 FP32[-1,3]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(SEED)
    weights = {
        "W1": rng.standard_normal((4, 8)).astype(np.float32),
        "B1": rng.standard_normal(8).astype(np.float32),
        "W2": rng.standard_normal((8, 3)).astype(np.float32),
        "B2": rng.standard_normal(3).astype(np.float32),
    }
    nodes = [
        helper.make_node("Gemm", ["INPUT0", "W1", "B1"], ["H"]),
        helper.make_node("Relu", ["H"], ["HR"]),
        helper.make_node("Gemm", ["HR", "W2", "B2"], ["OUTPUT0"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", 3])],
        initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(model.SerializeToString())


def build_sklearn_iris(out: Path) -> None:
    """LogisticRegression on the iris data bundled with scikit-learn; labels are species names."""
    import joblib
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    iris = load_iris()
    labels = iris.target_names[iris.target]
    clf = LogisticRegression(max_iter=500, random_state=SEED).fit(iris.data, labels)
    out.parent.mkdir(parents=True, exist_ok=True)
    joblib.dump(clf, out)


def main(which: list[str]) -> None:
    if not which or "onnx" in which:
        build_onnx_mlp(MODELS / "mlp_onnx" / "1" / "model.onnx")
    if not which or "sklearn" in which:
        build_sklearn_iris(MODELS / "iris_sklearn" / "model.joblib")


if __name__ == "__main__":
    main(sys.argv[1:])
