"""Answers how many of its calls ran at once: each call waits (up to WAIT_S) until as many calls
as the request's parameter "expect" have been inside together, then reports the peak seen."""

import threading
from typing import Any

import numpy as np

from rosettaserve import Model

WAIT_S = 20.0


class Concurrency(Model):
    def load(self) -> None:
        self.changed = threading.Condition()
        self.inside = 0
        self.peak = 0

    def predict(
        self, inputs: dict[str, np.ndarray], parameters: dict[str, Any]
    ) -> dict[str, np.ndarray]:
        expect = int(parameters.get("expect", 1))
        with self.changed:
            self.inside += 1
            self.peak = max(self.peak, self.inside)
            self.changed.notify_all()
            self.changed.wait_for(lambda: self.peak >= expect, timeout=WAIT_S)
            peak = self.peak
            self.inside -= 1
        return {"PEAK": np.array([peak], dtype=np.int32)}
