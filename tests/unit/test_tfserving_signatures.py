"""Signatures, version resolution, model status, metadata and the error body, over in-memory
models (no server)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from rosettaserve import Model
from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import InvalidInput, ModelError, ModelNotFound, Unsupported
from rosettaserve.core.registry import ModelVersion, VersionState
from rosettaserve.core.types import TensorSpec
from rosettaserve.protocols.tfserving import signatures
from rosettaserve.protocols.tfserving.status import Target, model_status, render_error, servable

X = TensorSpec("x", "FP32", (-1,))
Y = TensorSpec("y", "FP32", (-1,))


def version(
    number: str = "1",
    state: VersionState = VersionState.READY,
    config: dict[str, Any] | None = None,
    outputs: list[TensorSpec] | None = None,
    reason: str = "",
) -> ModelVersion:
    model = Model(name="m", version=number, config=config or {})
    return ModelVersion(
        "m", number, "python", state, reason, model, inputs=[X], outputs=outputs or [Y]
    )


class Repo:
    def __init__(self, versions: list[ModelVersion], labels: dict[str, str]) -> None:
        self._versions, self._labels = versions, labels

    def model_names(self) -> list[str]:
        return ["m"]

    def versions(self, name: str) -> list[ModelVersion] | None:
        return self._versions if name == "m" else None

    def version_for_label(self, name: str, label: str) -> str | None:
        return self._labels.get(label) if name == "m" else None


def plane(*versions: ModelVersion, **labels: str) -> DataPlane:
    return DataPlane(Repo(list(versions), labels))


# -- signatures -------------------------------------------------------------------------------


HALF_PLUS_TWO = {
    "tfserving": {
        "signatures": {
            "regress_x_to_y": {"method": "regress", "outputs": {"outputs": "y"}},
            "classify_x_to_y": {"method": "classify", "outputs": {"scores": "y"}},
        }
    }
}


def test_serving_default_plus_declared_signatures() -> None:
    mv = version(config=HALF_PLUS_TWO)
    found = signatures.signatures(mv)
    assert list(found) == ["serving_default", "regress_x_to_y", "classify_x_to_y"]
    assert found["serving_default"].inputs == {"x": X}
    assert found["regress_x_to_y"].outputs == {"outputs": Y}
    assert signatures.regress_output(found["regress_x_to_y"]) == ("outputs", Y)
    view = signatures.classify_view(found["classify_x_to_y"], mv)
    assert view.scores == ("scores", Y)
    assert view.classes is None


def test_signature_lookup_errors() -> None:
    mv = version()
    with pytest.raises(
        InvalidInput, match=r'^Serving signature name: "nope" not found in signature def$'
    ):
        signatures.find(mv, "nope", "predict")
    with pytest.raises(InvalidInput, match=r"^No signature was found with the name: nope$"):
        signatures.find(mv, "nope", "regress")
    assert signatures.find(mv, "", "predict").name == "serving_default"


def test_a_classifier_with_class_labels_classifies_with_its_probability_table() -> None:
    mv = version(outputs=[TensorSpec("predict", "BYTES", (-1,)), TensorSpec("p", "FP64", (-1, 3))])
    assert mv.model is not None
    mv.model.class_labels = ["a", "b", "c"]  # type: ignore[attr-defined]
    view = signatures.classify_view(signatures.find(mv, "", "classify"), mv)
    assert view.scores is not None
    assert view.scores[0] == "p"
    assert view.labels == ["a", "b", "c"]
    with pytest.raises(InvalidInput, match=r"^Expected one output Tensor\.$"):
        signatures.regress_output(signatures.find(mv, "", "regress"))


def test_a_model_without_classes_or_scores_cannot_classify() -> None:
    mv = version(outputs=[TensorSpec("p", "FP32", (-1, 3))])
    with pytest.raises(InvalidInput, match='at least one of "classes" or "scores"'):
        signatures.classify_view(signatures.find(mv, "", "classify"), mv)


@pytest.mark.parametrize(
    "section",
    [
        {"signatures": {"s": {"method": "explain"}}},
        {"signatures": {"s": {"outputs": ["missing"]}}},
        {"signatures": {"s": {"inputs": []}}},  # must take every model input
        {"signatures": {"s": {"typo": 1}}},
        {"signatures": ["s"]},
        {"other": 1},
    ],
)
def test_bad_signature_config_is_the_model_s_fault(section: Any) -> None:
    with pytest.raises(ModelError, match=r"model\.yaml of model 'm'"):
        signatures.signatures(version(config={"tfserving": section}))


def test_metadata_in_tf_s_shape() -> None:
    doc = signatures.metadata(version("123", config=HALF_PLUS_TWO))
    assert doc["model_spec"] == {"name": "m", "signature_name": "", "version": "123"}
    defs = doc["metadata"]["signature_def"]["signature_def"]
    assert defs["serving_default"] == {
        "inputs": {
            "x": {
                "dtype": "DT_FLOAT",
                "tensor_shape": {"dim": [{"size": "-1", "name": ""}], "unknown_rank": False},
                "name": "x",
            }
        },
        "outputs": {
            "y": {
                "dtype": "DT_FLOAT",
                "tensor_shape": {"dim": [{"size": "-1", "name": ""}], "unknown_rank": False},
                "name": "y",
            }
        },
        "method_name": "tensorflow/serving/predict",
        "defaults": {},
    }
    assert defs["regress_x_to_y"]["method_name"] == "tensorflow/serving/regress"
    assert list(defs["classify_x_to_y"]["outputs"]) == ["scores"]


# -- versions and status ----------------------------------------------------------------------


def test_latest_is_the_highest_available_version() -> None:
    dp = plane(version("1"), version("2"), version("3", VersionState.LOADING))
    assert servable(dp, Target("m")).version == "2"
    assert servable(dp, Target("m", 1)).version == "1"


@pytest.mark.parametrize(
    ("target", "error", "message"),
    [
        (Target("other"), ModelNotFound, "Servable not found for request: Latest(other)"),
        (Target("m", 3), ModelNotFound, "Servable not found for request: Specific(m, 3)"),
        (Target("m", 9), ModelNotFound, "Servable not found for request: Specific(m, 9)"),
        (
            Target("m", label="beta"),
            ModelNotFound,
            "Servable not found for request: Specific(m, 3)",
        ),
        (Target("m", label="nope"), InvalidInput, "Unrecognized servable version label: nope"),
    ],
)
def test_resolution_errors(target: Target, error: type[Exception], message: str) -> None:
    dp = plane(version("1"), version("3", VersionState.LOADING), stable="1", beta="3")
    with pytest.raises(error) as err:
        servable(dp, target)
    assert str(err.value) == message
    assert servable(dp, Target("m", label="stable")).version == "1"


def test_latest_of_a_model_with_nothing_available_is_404() -> None:
    dp = plane(version("1", VersionState.UNAVAILABLE, reason="boom"))
    with pytest.raises(ModelNotFound, match=r"^Servable not found for request: Latest\(m\)$"):
        servable(dp, Target("m"))


def test_status_lists_every_version_newest_first() -> None:
    dp = plane(
        version("1", VersionState.UNAVAILABLE, reason="model.py is missing"),
        version("2", VersionState.UNLOADING),
        version("10"),
        version("11", VersionState.LOADING),
    )
    entries = model_status(dp, Target("m", label="ignored"))["model_version_status"]
    assert [(e["version"], e["state"]) for e in entries] == [
        ("11", "LOADING"), ("10", "AVAILABLE"), ("2", "UNLOADING"), ("1", "END"),
    ]  # fmt: skip
    assert entries[1]["status"] == {"error_code": "OK", "error_message": ""}
    assert entries[3]["status"] == {"error_code": "UNKNOWN", "error_message": "model.py is missing"}
    one = model_status(dp, Target("m", 10))["model_version_status"]
    assert [e["version"] for e in one] == ["10"]


def test_status_errors() -> None:
    dp = plane(version("1"))
    with pytest.raises(ModelNotFound, match=r"^Could not find any versions of model x$"):
        model_status(dp, Target("x"))
    with pytest.raises(ModelNotFound, match=r"^Could not find version 2 of model m$"):
        model_status(dp, Target("m", 2))


def test_error_body_is_one_error_key_with_tf_s_status() -> None:
    response = render_error(ModelNotFound("Servable not found for request: Latest(half)"))
    assert response.status == 404
    assert response.content_type == "application/json"
    assert orjson.loads(response.body) == {"error": "Servable not found for request: Latest(half)"}
    assert render_error(InvalidInput("x")).status == 400
    assert render_error(Unsupported("x")).status == 501
