"""BYTES in, BYTES and INT64 out: upper-cases UTF-8 text and counts its bytes."""

import numpy as np

from rosettaserve import Model


class TextModel(Model):
    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        text = inputs["TEXT"]
        upper = np.array(
            [t.decode("utf-8", "replace").upper().encode() for t in text.ravel()], dtype=object
        ).reshape(text.shape)
        lengths = np.array([len(t) for t in text.ravel()], dtype=np.int64).reshape(text.shape)
        return {"UPPER": upper, "LENGTH": lengths}
