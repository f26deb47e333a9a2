"""OUT = IN, and CALLS: how many times the model ran (a cached answer repeats an earlier count)."""

import numpy as np
from twofold import Arrays, Model, OnTriton


class Cached(Model):
    def load(self) -> None:
        self.calls = 0

    def predict(self, inputs: Arrays) -> Arrays:
        self.calls += 1
        return {"OUT": inputs["IN"], "CALLS": np.array([self.calls], dtype=np.int64)}


class TritonPythonModel(OnTriton, Cached):
    """The same model under Triton's Python backend."""
