"""Y = X * 10: a step of the pipeline ensemble (and of caller's calls)."""

from twofold import Arrays, Model, OnTriton


class TimesTen(Model):
    def predict(self, inputs: Arrays) -> Arrays:
        return {"Y": inputs["X"] * 10}


class TritonPythonModel(OnTriton, TimesTen):
    """The same model under Triton's Python backend."""
