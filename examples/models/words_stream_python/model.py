"""A generator predict: yields the words of its text one response at a time."""

from collections.abc import Iterator

import numpy as np

from rosettaserve import Model


class WordStream(Model):
    def predict(self, inputs: dict[str, np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
        text = inputs["TEXT"].reshape(-1)[0].decode("utf-8", "replace")
        for word in text.split():
            yield {"WORD": np.array([word.encode()], dtype=object)}
