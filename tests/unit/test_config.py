from __future__ import annotations

from pathlib import Path

import pytest

from rosettaserve.core.types import TensorSpec
from rosettaserve.repository.config import ConfigError, VersionPolicy, parse_config, read_config
from rosettaserve.repository.layout import scan_model


def test_full_config_parses() -> None:
    config = parse_config(
        {
            "runtime": "python",
            "class": "Echo",
            "max_batch_size": 4,
            "inputs": [{"name": "IN", "datatype": "FP32", "shape": [-1, 3]}],
            "outputs": [{"name": "OUT", "datatype": "BYTES", "shape": [-1]}],
            "version_policy": {"specific": [1, 3]},
            "labels": {"stable": 1, "canary": 3},
            "parameters": {"k": "v"},
        }
    )
    assert config.runtime == "python"
    assert config.class_name == "Echo"
    assert config.max_batch_size == 4
    assert config.inputs == (TensorSpec("IN", "FP32", (-1, 3)),)
    assert config.outputs == (TensorSpec("OUT", "BYTES", (-1,)),)
    assert config.version_policy.select([1, 2, 3, 4]) == [1, 3]
    assert config.labels == {"stable": "1", "canary": "3"}
    assert config.parameters == {"k": "v"}


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (VersionPolicy(), [7]),
        (VersionPolicy(latest=2), [3, 7]),
        (VersionPolicy(latest=None, all=True), [1, 3, 7]),
        (VersionPolicy(latest=None, specific=(1, 9)), [1]),
    ],
)
def test_version_policy_selects(policy: VersionPolicy, expected: list[int]) -> None:
    assert policy.select([7, 1, 3]) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({}, "runtime is required"),
        (
            {"runtime": "onnx", "max_batch_size": -1},
            "max_batch_size: expected an integer >= 0, got -1",
        ),
        ({"runtime": "onnx", "inputs": [{"name": "x", "datatype": "FP33"}]}, "did you mean FP32"),
        ({"runtime": "onnx", "inputs": [{"datatype": "FP32"}]}, r"inputs\[0\]\.name is required"),
        (
            {"runtime": "onnx", "inputs": [{"name": "x", "datatype": "FP32", "shape": [-2]}]},
            "shape",
        ),
        (
            {"runtime": "onnx", "version_policy": {"latest": 0}},
            "version_policy.latest: expected an integer >= 1",
        ),
        ({"runtime": "onnx", "version_policy": {"newest": 1}}, "unknown key version_policy.newest"),
        (
            {"runtime": "onnx", "labels": {"stable": "one"}},
            r"labels\.stable: expected an integer >= 0, got 'one' \(text\)",
        ),
        (
            {"runtime": "onnx", "parameters": [1]},
            r"parameters: expected a mapping, got \[1\] \(a list\)",
        ),
    ],
)
def test_bad_config_says_what_is_wrong(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(raw)


def test_unparsable_yaml_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "model.yaml").write_text("runtime: [unclosed\n")
    with pytest.raises(ConfigError, match=r"model\.yaml cannot be read"):
        read_config(tmp_path)


def test_missing_yaml_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"model\.yaml is missing"):
        read_config(tmp_path)


def test_layout_numeric_folders_are_versions(tmp_path: Path) -> None:
    for name in ("1", "3", "notes"):
        (tmp_path / name).mkdir()
    model = scan_model(tmp_path)
    assert sorted(model.versions) == [1, 3]


def test_layout_files_in_model_folder_are_version_1(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"")
    assert scan_model(tmp_path).versions == {1: tmp_path}
