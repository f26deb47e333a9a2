"""Y = X + 1: a step of the pipeline ensemble (and of caller's calls)."""

from twofold import Arrays, Model, OnTriton


class AddOne(Model):
    def predict(self, inputs: Arrays) -> Arrays:
        return {"Y": inputs["X"] + 1}


class TritonPythonModel(OnTriton, AddOne):
    """The same model under Triton's Python backend."""
