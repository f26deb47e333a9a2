"""OUTPUT: INPUT plus the state the server gives (STATE_IN), which becomes the next state
(STATE_OUT): the model keeps nothing itself."""

import numpy as np
from twofold import Arrays, Model, OnTriton


class RunningSum(Model):
    def predict(self, inputs: Arrays) -> Arrays:
        x = inputs["INPUT"]
        total = np.where(inputs["START"] == 1, x, inputs["STATE_IN"] + x).astype(np.int32)
        return {"OUTPUT": total, "STATE_OUT": total}


class TritonPythonModel(OnTriton, RunningSum):
    """The same model under Triton's Python backend."""
