"""GrpsApi over an in-memory data plane: model selection, the online flag, metadata, predict."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import yaml

from rosettaserve import Model
from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import InvalidInput, ModelNotFound, ModelNotReady
from rosettaserve.core.invoker import Invoker
from rosettaserve.core.registry import ModelVersion, VersionState
from rosettaserve.core.types import TensorSpec
from rosettaserve.protocols.grps import convert
from rosettaserve.protocols.grps.api import GrpsApi, failure_for
from rosettaserve.protocols.grps.pb import grps_pb2 as pb

TEXT_IN = [TensorSpec("TEXT", "BYTES", (-1,))]
TEXT_OUT = [TensorSpec("OUT", "BYTES", (-1,))]


class Shout(Model):
    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"OUT": np.array([t.upper() + self.version.encode() for t in inputs["TEXT"]])}


class Words(Model):
    def predict(self, inputs: dict[str, np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
        for word in inputs["TEXT"][0].split():
            yield {"OUT": np.array([word], dtype=object)}


def version(name: str, number: str, model: Model, ready: bool = True) -> ModelVersion:
    model.version = number
    return ModelVersion(
        name=name,
        version=number,
        runtime="python",
        state=VersionState.READY if ready else VersionState.LOADING,
        model=model,
        invoker=Invoker(model),
        inputs=TEXT_IN,
        outputs=TEXT_OUT,
        labels=["stable"] if number == "1" else [],
    )


class Registry:
    def __init__(self) -> None:
        self.models = {
            "shout": [version("shout", "1", Shout()), version("shout", "2", Shout())],
            "shout-loud": [version("shout-loud", "7", Shout())],
            "words": [version("words", "1", Words())],
            "cold": [version("cold", "1", Shout(), ready=False)],
        }

    def model_names(self) -> list[str]:
        return list(self.models)

    def versions(self, name: str) -> list[ModelVersion] | None:
        return self.models.get(name)

    def version_for_label(self, name: str, label: str) -> str | None:
        return "1" if name == "shout" and label == "stable" else None


def api(default_model: str = "", started: bool = True) -> GrpsApi:
    dp = DataPlane(Registry())
    dp.started = started
    return GrpsApi(dp, default_model)


def predict(grps: GrpsApi, msg: Any, query_model: str = "") -> Any:
    payload = convert.payload_from_message(msg)
    response = asyncio.run(grps.infer(payload, query_model))
    return convert.to_message(response, payload.form)


# -- model selection ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "query", "default", "selected"),
    [
        ("shout-1", "shout-2", "words", ("shout", "1")),  # the payload wins
        ("", "shout-2", "words", ("shout", "2")),  # then ?model=
        ("", "", "shout-1", ("shout", "1")),  # then the configured default
        ("shout", "", "", ("shout", "")),  # a bare name: the highest ready version
        ("shout-loud", "", "", ("shout-loud", "")),  # a name with a dash is a name first
        ("shout-loud-7", "", "", ("shout-loud", "7")),
        ("shout-stable", "", "", ("shout", "1")),  # a label in place of the version
    ],
)
def test_selection_precedence_and_forms(
    payload: str, query: str, default: str, selected: tuple[str, str]
) -> None:
    assert api(default).select(payload, query) == selected


def test_no_model_anywhere_is_a_400_that_says_how_to_choose() -> None:
    with pytest.raises(InvalidInput, match="--grps-default-model"):
        api().select("", "")


@pytest.mark.parametrize("selector", ["nope", "nope-1", "-1", "shoutx-1"])
def test_unknown_models_are_404s_naming_the_model(selector: str) -> None:
    with pytest.raises(ModelNotFound, match=f"unknown model '{selector}'"):
        api().select(selector)


def test_an_unknown_version_of_a_known_model_names_the_served_ones() -> None:
    with pytest.raises(ModelNotFound, match=r"no version 9 \(served versions: 1, 2\)"):
        predict(api(), pb.GrpsMessage(str_data="x", model="shout-9"))


def test_predict_runs_the_selected_version() -> None:
    grps = api(default_model="shout-1")
    assert predict(grps, pb.GrpsMessage(str_data="hi")).str_data == "HI1"
    assert predict(grps, pb.GrpsMessage(str_data="hi"), "shout-2").str_data == "HI2"
    answer = predict(grps, pb.GrpsMessage(str_data="hi", model="shout"), "shout-1")
    assert (answer.str_data, answer.model) == ("HI2", "shout-2")


def test_a_model_that_is_not_ready_is_a_503() -> None:
    with pytest.raises(ModelNotReady):
        predict(api(), pb.GrpsMessage(str_data="x", model="cold"))


def test_streaming_yields_every_reply() -> None:
    grps = api()
    payload = convert.payload_from_message(pb.GrpsMessage(str_data="a bc d", model="words"))

    async def collect() -> list[str]:
        return [
            convert.to_message(r, payload.form).str_data async for r in grps.infer_stream(payload)
        ]

    assert asyncio.run(collect()) == ["a", "bc", "d"]


# -- health ------------------------------------------------------------------------------------


def test_ready_follows_the_server_until_online_or_offline_is_called() -> None:
    grps = api(started=False)
    assert not grps.ready()
    assert grps.readiness().status.code == 503
    grps.dp.started = True
    assert not grps.ready()  # model 'cold' is still loading
    cold = grps.dp.resolve("cold")
    cold.state = VersionState.READY
    assert grps.ready()  # online by itself once the models are loaded
    grps.set_online(False)
    assert not grps.ready()
    offline = grps.readiness().status
    assert (offline.code, offline.status) == (503, pb.Status.FAILURE)
    assert "offline" in offline.msg
    assert predict(grps, pb.GrpsMessage(str_data="x", model="shout")).str_data == "X2"
    grps.set_online(True)
    assert grps.readiness().status == pb.Status(code=200, msg="OK", status=pb.Status.SUCCESS)


def test_online_before_the_models_load_is_honoured() -> None:
    grps = api(started=False)
    grps.set_online(True)
    assert grps.ready()


# -- metadata ----------------------------------------------------------------------------------


def test_server_metadata_is_yaml_listing_every_version() -> None:
    doc = yaml.safe_load(api("shout").server_metadata())
    assert doc["server"]["name"] == "rosettaserve"
    assert doc["grps"] == {"default_model": "shout", "online": False}  # 'cold' is loading
    assert [m["model"] for m in doc["models"]] == [
        "shout-1",
        "shout-2",
        "shout-loud-7",
        "words-1",
        "cold-1",
    ]
    assert doc["models"][-1]["state"] == "LOADING"


def test_model_metadata_by_str_data_then_by_selection() -> None:
    grps = api(default_model="words")
    by_name = yaml.safe_load(grps.model_metadata(pb.GrpsMessage(str_data="shout")))
    assert (by_name["model"], by_name["versions"], by_name["streaming"]) == (
        "shout-2",
        ["1", "2"],
        False,
    )
    assert by_name["inputs"] == [{"name": "TEXT", "datatype": "BYTES", "shape": [-1]}]
    pinned = yaml.safe_load(grps.model_metadata(pb.GrpsMessage(str_data="shout-1")))
    assert (pinned["version"], pinned["labels"]) == ("1", ["stable"])
    default = yaml.safe_load(grps.model_metadata(pb.GrpsMessage()))
    assert (default["name"], default["streaming"]) == ("words", True)
    with pytest.raises(ModelNotFound, match="unknown model 'zzz'"):
        grps.model_metadata(pb.GrpsMessage(str_data="zzz"))


def test_unexpected_errors_become_500_failures() -> None:
    msg = failure_for(KeyError("boom"))
    assert (msg.status.code, msg.status.status) == (500, pb.Status.FAILURE)
    assert "KeyError" in msg.status.msg
