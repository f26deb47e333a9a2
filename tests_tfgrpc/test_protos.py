"""Our TF Serving messages (protocols/tfserving/pb) are TensorFlow's and TF Serving's own: they
import beside tensorflow-serving-api's modules in one process, each of their files is the very
descriptor the pinned packages ship, and they are what the generation script makes of them."""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf
from google.protobuf import descriptor_pool
from tensorflow_serving.apis import model_service_pb2, predict_pb2, prediction_service_pb2

from tests_tfgrpc.conftest import ROOT, ROSETTASERVE

# this venv has TensorFlow, not rosettaserve: the modules under test are read from the tree
sys.path.insert(0, str(ROOT / "src"))

from rosettaserve.protocols.tfserving import messages
from rosettaserve.protocols.tfserving.pb import POOL
from rosettaserve.protocols.tfserving.pb.tensorflow_serving.apis import (
    model_service_pb2 as our_model_service,
)
from rosettaserve.protocols.tfserving.pb.tensorflow_serving.apis import (
    prediction_service_pb2 as our_prediction_service,
)


def _files(root: str) -> list[str]:
    """``root`` and every file it imports, protobuf's own left out."""
    seen: list[str] = []

    def visit(name: str) -> None:
        found = POOL.FindFileByName(name)
        for dependency in found.dependencies:
            if dependency.name not in seen and not dependency.name.startswith("google/"):
                visit(dependency.name)
        if name not in seen:
            seen.append(name)

    visit(root)
    return seen


def test_each_file_is_the_one_tensorflow_serving_ships() -> None:
    ours = {f.name for m in (our_prediction_service, our_model_service) for f in [m.DESCRIPTOR]}
    theirs = {f.name for m in (prediction_service_pb2, model_service_pb2) for f in [m.DESCRIPTOR]}
    assert ours == theirs
    names = [n for root in sorted(ours) for n in _files(root)]
    assert "tensorflow/core/framework/tensor.proto" in names
    default = descriptor_pool.Default()
    for name in names:
        assert POOL.FindFileByName(name).serialized_pb == (
            default.FindFileByName(name).serialized_pb
        ), name


def test_messages_cross_between_the_two_in_one_process() -> None:
    sent = predict_pb2.PredictRequest()
    sent.model_spec.name = "m"
    sent.model_spec.version.value = 3
    sent.inputs["x"].CopyFrom(tf.make_tensor_proto(np.arange(6, dtype=np.float32).reshape(2, 3)))
    read = messages.PredictRequest.FromString(sent.SerializeToString())
    assert read.model_spec.version.value == 3
    assert read.inputs["x"].dtype == messages.DT_FLOAT
    assert (
        read.DESCRIPTOR.full_name
        == sent.DESCRIPTOR.full_name
        == "tensorflow.serving.PredictRequest"
    )
    assert predict_pb2.PredictRequest.FromString(read.SerializeToString()) == sent


def test_the_generated_code_is_what_the_script_makes() -> None:
    python = Path(ROSETTASERVE).parent / "python"  # the main venv's, with grpcio-tools
    script = ROOT / "scripts" / "generate_tfserving_protos.py"
    command = [str(python), str(script), "--check", "--site", site.getsitepackages()[0]]
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=os.environ)
    assert done.returncode == 0, done.stdout + done.stderr
