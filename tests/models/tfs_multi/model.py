"""Three inputs, six outputs: echoes and reductions of them, for the TF Serving REST tests."""

import numpy as np

from rosettaserve import Model


class Multi(Model):
    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        tag, signal, sensor = inputs["tag"], inputs["signal"], inputs["sensor"]
        label = np.array([t.decode("utf-8", "replace").upper().encode() for t in tag], dtype=object)
        return {
            "tag_bytes": tag,
            "label": label,
            "signal_sum": signal.sum(axis=1, dtype=np.float32),
            "sensor_max": sensor.reshape(len(sensor), -1).max(axis=1),
            "count": np.array(len(tag), dtype=np.int64),
            "signal_flat": signal.reshape(-1),
        }
