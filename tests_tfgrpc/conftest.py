"""TF Serving gRPC tests with TF Serving's own client, in their own pytest process from
``.venv-tf`` (``make test``): ``.venv-tf/bin/python -m pytest -q tests_tfgrpc``.

``.venv-tf`` holds ``tensorflow-cpu`` and ``tensorflow-serving-api`` (the stubs and
``tf.make_tensor_proto`` / ``tf.make_ndarray``); the server is a real ``rosettaserve serve``
started from the main venv's console script (``ROSETTASERVE`` overrides its path), so the server
never shares a process with TensorFlow.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

from tests.serverproc import ServerProcess, launch, served, wait_until_ready

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "models"
IDENTITY = ROOT / "tests" / "models" / "_identity" / "model.py"
SERVED = ("half_plus_two", "mlp_onnx", "iris_sklearn", "versioned_python")
DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64")
DATATYPES += ("FP16", "FP32", "FP64", "BF16", "BYTES")
ROSETTASERVE = os.environ.get("ROSETTASERVE", str(ROOT / ".venv" / "bin" / "rosettaserve"))


def _repo(dest: Path) -> Path:
    for name in SERVED:
        shutil.copytree(EXAMPLES / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    for dtype in DATATYPES:  # identity_<dtype>: INPUT0 -> OUTPUT0, shape [-1, -1]
        folder = dest / f"identity_{dtype.lower()}"
        folder.mkdir()
        shutil.copy(IDENTITY, folder / "model.py")
        (folder / "model.yaml").write_text(
            "runtime: python\nclass: Identity\n"
            f"inputs: [{{name: INPUT0, datatype: {dtype}, shape: [-1, -1]}}]\n"
            f"outputs: [{{name: OUTPUT0, datatype: {dtype}, shape: [-1, -1]}}]\n"
        )
    return dest


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = _repo(tmp_path_factory.mktemp("tfgrpc_repo"))
    cmd = [ROSETTASERVE, "serve", str(repo), "--http-port", "0", "--grpc-port", "0"]
    proc, lines, addresses = launch(cmd, ("http", "grpc"))
    process = ServerProcess(proc, addresses["http"], lines, addresses["grpc"])
    wait_until_ready(process)
    yield from served(process)


@pytest.fixture(scope="session")
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    target = server.grpc_address.removeprefix("grpc://")
    options = [("grpc.max_receive_message_length", 64 << 20)]
    with grpc.insecure_channel(target, options=options) as chan:
        yield chan


@pytest.fixture(scope="session")
def predictions(channel: grpc.Channel) -> prediction_service_pb2_grpc.PredictionServiceStub:
    return prediction_service_pb2_grpc.PredictionServiceStub(channel)


@pytest.fixture(scope="session")
def models(channel: grpc.Channel) -> model_service_pb2_grpc.ModelServiceStub:
    return model_service_pb2_grpc.ModelServiceStub(channel)
