"""Version 2: OUTPUT0 = INPUT0 * parameters.factor (from model.yaml)."""

import numpy as np

from rosettaserve import Model


class Scale(Model):
    def load(self) -> None:
        self.factor = np.float32(self.config["parameters"]["factor"])

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"OUTPUT0": inputs["INPUT0"] * self.factor}
