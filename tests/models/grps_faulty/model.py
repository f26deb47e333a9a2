import numpy as np

from rosettaserve import Model


class Faulty(Model):
    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        text = inputs["TEXT"].reshape(-1)[0]
        if text == b"bad":
            raise ValueError("the text 'bad' is refused")
        if text == b"crash":
            raise RuntimeError("the model crashed on purpose")
        return {"ECHO": np.array([text], dtype=object)}
