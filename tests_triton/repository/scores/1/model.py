"""SCORES = IN: what the classification extension ranks."""

from twofold import Arrays, Model, OnTriton


class Scores(Model):
    def predict(self, inputs: Arrays) -> Arrays:
        return {"SCORES": inputs["IN"]}


class TritonPythonModel(OnTriton, Scores):
    """The same model under Triton's Python backend."""
