"""OUTPUT: the sum of the sequence's INPUTs so far, kept by the model under the sequence's
correlation id (CORRID), started afresh at START and forgotten at END. Rows whose READY is 0 hold
no request (the direct strategy's empty slots) and answer 0."""

import numpy as np
from twofold import Arrays, Model, OnTriton


class Accumulate(Model):
    def load(self) -> None:
        self.totals: dict[object, int] = {}

    def predict(self, inputs: Arrays) -> Arrays:
        given = inputs["INPUT"]
        out = np.zeros_like(given)
        for row in range(len(given)):
            if not inputs["READY"][row, 0]:
                continue
            key = inputs["CORRID"][row, 0]
            key = key if isinstance(key, bytes) else int(key)
            start = bool(inputs["START"][row, 0])
            total = int(given[row, 0]) + (0 if start else self.totals.get(key, 0))
            self.totals[key] = total
            if inputs["END"][row, 0]:
                del self.totals[key]
            out[row, 0] = total
        return {"OUTPUT": out}


class TritonPythonModel(OnTriton, Accumulate):
    """The same model under Triton's Python backend."""
