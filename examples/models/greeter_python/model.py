"""String in, string out: greets every name it is given."""

import numpy as np

from rosettaserve import Model


class Greeter(Model):
    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = inputs["NAME"]
        greetings = [b"hello, " + name + b"!" for name in names.ravel()]
        return {"GREETING": np.array(greetings, dtype=object).reshape(names.shape)}
