"""Calls between models (Triton's BLS): OUT = picky(INPUT) * 2 + 1 through three other models.

``self.infer`` is rosettaserve's ``Model.infer`` here, and under Triton ``OnTriton.infer``:
``pb_utils.InferenceRequest(...).exec()``. A callee's error (picky's, for a negative value)
raises in this model and, uncaught, is its answer.
"""

from twofold import Arrays, Model, OnTriton


class Caller(Model):
    def predict(self, inputs: Arrays) -> Arrays:
        checked = self.infer("picky", {"X": inputs["INPUT"]}, outputs=["Y"])["Y"]
        scaled = self.infer("scale", {"INPUT": checked}, outputs=["SCALED"])["SCALED"]
        return {"OUT": self.infer("add_one", {"X": scaled}, outputs=["Y"])["Y"]}


class TritonPythonModel(OnTriton, Caller):
    """The same model under Triton's Python backend."""
