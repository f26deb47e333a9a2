"""Triton's extensions over gRPC with tritonclient.grpc (which cannot share the main suite's
process): the ensemble and the classification tests' models, served as there."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.integration import test_ensembles as ensembles
from tests.integration import test_oip_classification as classification
from tests.serverproc import ServerProcess, served


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("triton_extensions")
    ensembles.build_repository(repo)
    classification.build_repository(repo)
    yield from served(ensembles.started(repo))


@pytest.fixture(scope="module")
def grpc(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        yield client


def test_an_ensemble_answers_over_grpc(grpc: grpcclient.InferenceServerClient) -> None:
    given = grpcclient.InferInput("IN", [2], "FP32")
    given.set_data_from_numpy(np.array([1.0, 2.0], np.float32))
    answer = grpc.infer("pipeline", [given]).as_numpy("OUT")
    assert answer is not None
    assert answer.tolist() == [23.0, 45.0]


def test_the_model_configuration_shows_the_steps_over_grpc(
    grpc: grpcclient.InferenceServerClient,
) -> None:
    config = grpc.get_model_config("pipeline", as_json=True)["config"]
    assert config["platform"] == "ensemble"
    steps = config["ensemble_scheduling"]["step"]
    assert [s["model_name"] for s in steps] == ["scale", "add_one", "times_ten", "join"]
    assert steps[3]["output_map"] == {"SUM": "OUT"}


def test_classification_over_grpc(server: ServerProcess) -> None:
    url = server.grpc_address
    classes, meta = classification.classify(
        grpcclient, url, "batched", classification.ROWS, SCORES=2
    )
    assert classes.tolist() == classification.LARGEST
    assert meta.datatype == "BYTES"
    flat, _ = classification.classify(grpcclient, url, "flat", classification.ROWS[0], COUNTS=9)
    assert flat.tolist() == classification.INTEGERS
