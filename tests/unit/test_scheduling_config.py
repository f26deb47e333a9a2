"""model.yaml's batching, queue and timeout keys, and how the model configuration shows them."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.json_format import ParseDict

from rosettaserve.core.registry import DynamicBatching, ModelVersion
from rosettaserve.core.types import TensorSpec
from rosettaserve.protocols.oip import extensions
from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from rosettaserve.repository.config import ConfigError, parse_config


def config(**keys: Any) -> dict[str, Any]:
    return {"runtime": "python", "max_batch_size": 8, **keys}


def test_batching_is_off_unless_asked_for() -> None:
    parsed = parse_config(config())
    assert parsed.dynamic_batching is None
    assert parsed.max_queue_size is None
    assert parsed.timeout_us is None
    assert parse_config(config(dynamic_batching=False)).dynamic_batching is None


@pytest.mark.parametrize("value", [{}, True])
def test_empty_or_true_turns_it_on_with_defaults(value: Any) -> None:
    assert parse_config(config(dynamic_batching=value)).dynamic_batching == DynamicBatching()


def test_every_key_parses() -> None:
    parsed = parse_config(
        config(
            dynamic_batching={
                "preferred_batch_size": [8, 4, 4],
                "max_queue_delay_microseconds": 50,
            },
            max_queue_size=16,
            default_timeout_microseconds=0,
        )
    )
    assert parsed.dynamic_batching == DynamicBatching((4, 8), 50)
    assert parsed.max_queue_size == 16
    assert parsed.timeout_us == 0


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"max_batch_size": 0, "dynamic_batching": {}}, "needs 'max_batch_size' > 0"),
        ({"dynamic_batching": {"preferred_batch_size": [9]}}, r"from 1 to max_batch_size \(8\)"),
        (
            {"dynamic_batching": {"preferred_batch_size": 4}},
            "preferred_batch_size: expected a list of integers >= 1, got 4",
        ),
        ({"dynamic_batching": {"max_queue_delay_microseconds": -1}}, "expected an integer >= 0"),
        (
            {"dynamic_batching": {"priority_levels": 2}},
            "unknown key dynamic_batching.priority_levels",
        ),
        ({"dynamic_batching": [4]}, "dynamic_batching: expected true or false or a mapping"),
        ({"max_queue_size": -3}, "max_queue_size: expected an integer >= 0"),
        (
            {"default_timeout_microseconds": 1.5},
            "default_timeout_microseconds: expected an integer",
        ),
    ],
)
def test_bad_values_are_refused_with_the_key_named(keys: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(config(**keys))


def test_model_config_shows_dynamic_batching_in_triton_shape() -> None:
    mv = ModelVersion(name="m", version="1", runtime="onnx", max_batch_size=8)
    assert "dynamic_batching" not in extensions.model_config(mv)
    mv.dynamic_batching = DynamicBatching((4, 8), 100)
    mv.max_queue_size, mv.timeout_us = 16, 2_000
    doc = extensions.model_config(mv)
    assert doc["dynamic_batching"] == {
        "preferred_batch_size": [4, 8],
        "max_queue_delay_microseconds": 100,
        "default_queue_policy": {
            "allow_timeout_override": True,
            "max_queue_size": 16,
            "default_timeout_microseconds": 2_000,
        },
    }
    msg = ParseDict({"config": doc}, pb.ModelConfigResponse())  # what gRPC ModelConfig sends
    batching = msg.config.dynamic_batching
    assert list(batching.preferred_batch_size) == [4, 8]
    assert batching.default_queue_policy.max_queue_size == 16


def test_model_config_shows_label_files_and_the_response_cache_as_triton_does() -> None:
    """An output's label_filename (labels.txt names the classes of every output) and
    response_cache {"enable": true}: only when the version has them."""
    outputs = [TensorSpec("A", "FP32", (-1,)), TensorSpec("B", "INT64", (1,))]
    mv = ModelVersion(name="m", version="1", runtime="python", outputs=outputs)
    doc = extensions.model_config(mv)
    assert "response_cache" not in doc
    assert all("label_filename" not in o for o in doc["output"])
    mv.class_labels, mv.response_cache = ["cat", "dog"], True
    doc = extensions.model_config(mv)
    assert doc["response_cache"] == {"enable": True}
    assert [o["label_filename"] for o in doc["output"]] == ["labels.txt", "labels.txt"]
    msg = ParseDict({"config": doc}, pb.ModelConfigResponse())  # what gRPC ModelConfig sends
    assert msg.config.response_cache.enable
    assert [o.label_filename for o in msg.config.output] == ["labels.txt", "labels.txt"]
