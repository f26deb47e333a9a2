"""Version 1: OUTPUT0 = INPUT0 (shared by every version without a model.py of its own)."""

import numpy as np

from rosettaserve import Model


class Scale(Model):
    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"OUTPUT0": inputs["INPUT0"]}
