"""Shared by the generated identity_<dtype> test models: OUTPUT0 = INPUT0."""

import numpy as np

from rosettaserve import Model


class Identity(Model):
    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"OUTPUT0": inputs["INPUT0"]}
