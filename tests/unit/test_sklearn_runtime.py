"""runtimes/sklearn.py: the outputs it declares for an estimator are the shapes it answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import joblib
import numpy as np
import pytest
from sklearn.ensemble import RandomForestRegressor
from sklearn.linear_model import LogisticRegression

from rosettaserve.core.types import shape_matches
from rosettaserve.runtimes.sklearn import SklearnModel

X = np.random.default_rng(0).random((12, 3))


@pytest.mark.parametrize(
    ("estimator", "y"),
    [
        (RandomForestRegressor(n_estimators=2, random_state=0), X[:, 0]),
        (RandomForestRegressor(n_estimators=2, random_state=0), X[:, :2]),
        (LogisticRegression(), (X[:, 0] > 0.5).astype(np.int64)),
    ],
    ids=["one target", "two targets", "classifier"],
)
def test_every_declared_output_has_the_shape_and_type_of_the_answer(
    tmp_path: Path, estimator: Any, y: np.ndarray
) -> None:
    joblib.dump(estimator.fit(X, y), tmp_path / "model.joblib")
    model = SklearnModel(name="m", path=tmp_path)
    model.load()
    answer = model.predict({"input": X[:4]})
    assert [s.name for s in model.outputs] == list(answer)
    for spec in model.outputs:
        assert shape_matches(spec.shape, answer[spec.name].shape), (spec, answer[spec.name].shape)
