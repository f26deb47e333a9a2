"""TensorFlow Serving's half_plus_two test model: y = a * x + b (model.yaml sets b = 3)."""

import numpy as np

from rosettaserve import Model


class HalfPlusTwo(Model):
    def load(self) -> None:
        parameters = self.config.get("parameters") or {}
        self.a = np.float32(parameters.get("a", 0.5))
        self.b = np.float32(parameters.get("b", 2.0))

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"y": self.a * inputs["x"] + self.b}
