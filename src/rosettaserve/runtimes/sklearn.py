"""The ``sklearn`` runtime: a joblib file (pickle: load only repositories you trust)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rosettaserve.core import dtypes
from rosettaserve.core.model import Arrays, Model
from rosettaserve.core.types import TensorSpec
from rosettaserve.runtimes import model_file

DEFAULT_FILE = "model.joblib"
DEFAULT_INPUT = "input"


class SklearnModel(Model):
    platform = "sklearn"

    def load(self) -> None:
        import joblib

        self.estimator = joblib.load(model_file(self, DEFAULT_FILE))
        self.has_proba = hasattr(self.estimator, "predict_proba")
        self.class_labels = _class_labels(self.estimator) if self.has_proba else None
        if not self.inputs:
            features = int(getattr(self.estimator, "n_features_in_", -1))
            self.inputs = [TensorSpec(DEFAULT_INPUT, "FP64", (-1, features))]
        if not self.outputs:
            self.outputs = self._default_outputs()

    def _default_outputs(self) -> list[TensorSpec]:
        classes = getattr(self.estimator, "classes_", None)
        label_type = (
            "FP64" if classes is None else dtypes.from_numpy(np.asarray(classes).dtype).name
        )
        targets = int(getattr(self.estimator, "n_outputs_", 1))  # fit on several: 2-D answers
        outputs = [TensorSpec("predict", label_type, (-1,) if targets <= 1 else (-1, targets))]
        if self.has_proba:
            outputs.append(
                TensorSpec("predict_proba", "FP64", (-1, 0 if classes is None else len(classes)))
            )
        return outputs

    def predict(self, inputs: Arrays) -> dict[str, Any]:
        (features,) = inputs.values()
        result: dict[str, Any] = {"predict": self.estimator.predict(features)}
        if self.has_proba:
            result["predict_proba"] = self.estimator.predict_proba(features)
        return result


def _class_labels(estimator: Any) -> list[str] | None:
    """A classifier's classes as text, in predict_proba's column order (for classify APIs)."""
    classes = getattr(estimator, "classes_", None)
    if classes is None:
        return None
    return [c.decode() if isinstance(c, bytes) else str(c) for c in np.asarray(classes).tolist()]
