"""OUTPUT0 = INPUT0: the model of bench/triton_extensions.py, the same for both servers."""

from twofold import Arrays, Model, OnTriton


class Identity(Model):
    def predict(self, inputs: Arrays) -> Arrays:
        return {"OUTPUT0": inputs["INPUT0"]}


class TritonPythonModel(OnTriton, Identity):
    """The same model under Triton's Python backend."""
