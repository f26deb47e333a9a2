"""Y = X, but negative values are refused (a ValueError: the client's mistake)."""

from twofold import Arrays, Model, OnTriton


class Picky(Model):
    def predict(self, inputs: Arrays) -> Arrays:
        if (inputs["X"] < 0).any():
            raise ValueError("negative values are refused")
        return {"Y": inputs["X"]}


class TritonPythonModel(OnTriton, Picky):
    """The same model under Triton's Python backend."""
