"""OUT = IN * 2, for rosettaserve (Double) and Triton's Python backend (TritonPythonModel)."""

from twofold import Arrays, Model, OnTriton


class Double(Model):
    def predict(self, inputs: Arrays) -> Arrays:
        return {"OUT": inputs["IN"] * 2}


class TritonPythonModel(OnTriton, Double):
    """The same model under Triton's Python backend."""
