import time
from typing import Any

import numpy as np

from rosettaserve import Model


class Slow(Model):
    def predict(
        self, inputs: dict[str, np.ndarray], parameters: dict[str, Any]
    ) -> dict[str, np.ndarray]:
        time.sleep(float(parameters.get("sleep", 0)))
        return {"OUTPUT0": inputs["INPUT0"]}
