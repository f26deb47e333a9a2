"""Strings: UPPER is TEXT in capitals, LENGTH each one's byte count."""

import numpy as np
from twofold import Arrays, Model, OnTriton


class Upper(Model):
    def predict(self, inputs: Arrays) -> Arrays:
        text = inputs["TEXT"]
        upper = np.array([bytes(t).upper() for t in text.flat], dtype=object).reshape(text.shape)
        lengths = np.array([len(t) for t in text.flat], dtype=np.int64).reshape(text.shape)
        return {"UPPER": upper, "LENGTH": lengths}


class TritonPythonModel(OnTriton, Upper):
    """The same model under Triton's Python backend."""
