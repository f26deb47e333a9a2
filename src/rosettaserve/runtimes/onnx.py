"""The ``onnx`` runtime: ONNX Runtime, signature read from the graph."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rosettaserve.core.model import Arrays, Model
from rosettaserve.core.types import TensorSpec
from rosettaserve.repository.config import ConfigError
from rosettaserve.runtimes import model_file

DEFAULT_FILE = "model.onnx"

# ONNX Runtime type strings -> V2 datatypes
ORT_TYPES = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(bfloat16)": "BF16",
    "tensor(string)": "BYTES",
}


class OnnxModel(Model):
    platform = "onnxruntime_onnx"

    def load(self) -> None:
        params = self.config.get("parameters") or {}
        self.session = session(model_file(self, DEFAULT_FILE), params)
        graph_in = [_spec(a) for a in self.session.get_inputs()]
        graph_out = [_spec(a) for a in self.session.get_outputs()]
        self.inputs = _override(graph_in, self.inputs, "inputs")
        self.outputs = _override(graph_out, self.outputs, "outputs")
        self._in_names = dict(
            zip((s.name for s in self.inputs), (s.name for s in graph_in), strict=True)
        )
        self._out_names = [s.name for s in graph_out]
        self._public_out = [s.name for s in self.outputs]
        self._bytes_in = {s.name for s in self.inputs if s.datatype == "BYTES"}

    def predict(self, inputs: Arrays) -> dict[str, Any]:
        feed = {}
        for name, arr in inputs.items():
            value = _as_str(arr) if name in self._bytes_in else arr  # ORT: str for tensor(string)
            feed[self._in_names[name]] = value
        results = self.session.run(self._out_names, feed)
        return dict(zip(self._public_out, results, strict=True))


def session(path: Path, params: dict[str, Any]) -> Any:
    """An ONNX Runtime session as a model.yaml's ``parameters`` ask (threads, providers)."""
    import onnxruntime as ort

    providers = params.get("providers") or ["CPUExecutionProvider"]
    return ort.InferenceSession(str(path), session_options(params), providers=providers)


def session_options(params: dict[str, Any]) -> Any:
    """The session's threads. Its pool threads do not spin unless ``allow_spinning`` says so:
    ONNX Runtime's default spin-wait keeps each pool thread busy after every op, on the CPU the
    server's event loop, its other models and its neighbours need (a pod under a CPU limit
    pays for the spinning in its quota)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = int(params.get("intra_op_threads", 0))
    options.inter_op_num_threads = int(params.get("inter_op_threads", 0))
    spin = "1" if params.get("allow_spinning", False) else "0"
    options.add_session_config_entry("session.intra_op.allow_spinning", spin)
    options.add_session_config_entry("session.inter_op.allow_spinning", spin)
    return options


def _as_str(arr: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.vectorize(lambda b: b.decode(errors="replace"), otypes=[object])(arr)
    return out


def _spec(arg: Any) -> TensorSpec:
    datatype = ORT_TYPES.get(arg.type)
    if datatype is None:
        raise ConfigError(f"ONNX tensor '{arg.name}' has type {arg.type}, which has no V2 datatype")
    shape = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in arg.shape)
    return TensorSpec(arg.name, datatype, shape)


def _override(graph: list[TensorSpec], declared: list[TensorSpec], key: str) -> list[TensorSpec]:
    """model.yaml may rename or reshape the graph's tensors, position by position."""
    if not declared:
        return graph
    if len(declared) != len(graph):
        names = [s.name for s in graph]
        raise ConfigError(
            f"model.yaml declares {len(declared)} {key}, "
            f"but the ONNX graph has {len(graph)}: {names}"
        )
    for mine, theirs in zip(declared, graph, strict=True):
        if mine.datatype != theirs.datatype:
            raise ConfigError(
                f"model.yaml says {key} '{mine.name}' is {mine.datatype}, "
                f"but the ONNX graph's '{theirs.name}' is {theirs.datatype}"
            )
    return declared
