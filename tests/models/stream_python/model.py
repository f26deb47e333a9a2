from collections.abc import Iterator

import numpy as np

from rosettaserve import Model


class Counter(Model):
    def predict(self, inputs: dict[str, np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
        for value in inputs["INPUT0"]:
            yield {"OUTPUT0": np.array([value], dtype=np.int32)}
