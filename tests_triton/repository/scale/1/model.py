"""SCALED = INPUT * 2: a step of the pipeline ensemble (and of caller's calls)."""

from twofold import Arrays, Model, OnTriton


class Scale(Model):
    def predict(self, inputs: Arrays) -> Arrays:
        return {"SCALED": inputs["INPUT"] * 2}


class TritonPythonModel(OnTriton, Scale):
    """The same model under Triton's Python backend."""
