"""CALLS: how many times the model ran, this call and its warmup samples included."""

import numpy as np
from twofold import Arrays, Model, OnTriton


class Counter(Model):
    def load(self) -> None:
        self.calls = 0

    def predict(self, inputs: Arrays) -> Arrays:
        self.calls += 1
        return {"CALLS": np.array([self.calls], dtype=np.int64)}


class TritonPythonModel(OnTriton, Counter):
    """The same model under Triton's Python backend."""
