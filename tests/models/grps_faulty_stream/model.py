from collections.abc import Iterator

import numpy as np

from rosettaserve import Model


class FaultyStream(Model):
    def predict(self, inputs: dict[str, np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
        text = inputs["TEXT"].reshape(-1)[0].decode()
        if text == "fail-first":
            raise RuntimeError("failed before the first part")
        count = 2 if text == "fail-midway" else int(text)
        for i in range(1, count + 1):
            yield {"PART": np.array([f"part {i}".encode()], dtype=object)}
        if text == "fail-midway":
            raise RuntimeError("failed after two parts")
