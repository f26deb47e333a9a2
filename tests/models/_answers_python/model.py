"""Models whose answers fit their declaration, or do not: x FP32 [-1] in, y FP32 [-1] out (the
model.yaml of each is written by tests/integration/test_model_answers.py, which names a class).
"""

from typing import Any

import numpy as np

from rosettaserve import Model

Arrays = dict[str, np.ndarray]


class Double(Model):
    """The answer a neighbour of the wrong ones expects: y = 2x."""

    def predict(self, inputs: Arrays) -> Any:
        return {"y": inputs["x"] * 2}


class DoubleInFloat64(Model):
    """2x computed in float64, served as the declared FP32 (a float's precision only)."""

    def predict(self, inputs: Arrays) -> Any:
        return {"y": inputs["x"].astype(np.float64) * 2}


class DoubleAndMore(Model):
    """2x, and an output it does not declare (not served)."""

    def predict(self, inputs: Arrays) -> Any:
        return {"debug": np.array([b"not served"], dtype=object), "y": inputs["x"] * 2}


class ReturnsNone(Model):
    def predict(self, inputs: Arrays) -> Any:
        return {"y": None}


class OtherName(Model):
    """Its declared output missing, an undeclared one in its place."""

    def predict(self, inputs: Arrays) -> Any:
        return {"z": inputs["x"] * 2}


class Complex(Model):
    def predict(self, inputs: Arrays) -> Any:
        return {"y": inputs["x"].astype(np.complex64) + 1j}


class Rank3(Model):
    def predict(self, inputs: Arrays) -> Any:
        return {"y": inputs["x"].reshape(-1, 1, 1)}


class Objects(Model):
    def predict(self, inputs: Arrays) -> Any:
        return {"y": np.array([*inputs["x"].tolist(), None], dtype=object)}


class Raises5MB(Model):
    def predict(self, inputs: Arrays) -> Any:
        raise RuntimeError("r" * 5_000_000)


class Refuses5MB(Model):
    def predict(self, inputs: Arrays) -> Any:
        raise ValueError("v" * 5_000_000)
