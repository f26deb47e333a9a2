"""model.yaml's declaration: every mistake is named where it is, with the closest known key or
value; what the project defines is accepted, python parameters stay free-form."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import rosettaserve
from rosettaserve.repository.config import ConfigError, parse_config
from rosettaserve.repository.declare import rows
from rosettaserve.repository.model_yaml import LLM_PARAMETERS, MODEL_YAML, RUNTIMES
from tests.conftest import EXAMPLES, TEST_MODELS


def refused(**keys: Any) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config({"runtime": "python", **keys})
    return str(info.value)


TENSOR = {"name": "x", "datatype": "FP32", "shape": [-1]}


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"max_batch_sise": 8}, "unknown key max_batch_sise: did you mean max_batch_size?"),
        ({"isolaton": "thread"}, "unknown key isolaton: did you mean isolation?"),
        (
            {"inputs": [TENSOR, {**TENSOR, "datatyp": "FP32"}]},
            "unknown key inputs[1].datatyp: did you mean inputs[1].datatype?",
        ),
        (
            {"outputs": [{**TENSOR, "shap": [2]}]},
            "unknown key outputs[0].shap: did you mean outputs[0].shape?",
        ),
        (
            {"version_policy": {"lates": 2}},
            "unknown key version_policy.lates: did you mean version_policy.latest?",
        ),
        (
            {"max_batch_size": 4, "dynamic_batching": {"max_queue_delay_micros": 5}},
            "unknown key dynamic_batching.max_queue_delay_micros: did you mean "
            "dynamic_batching.max_queue_delay_microseconds?",
        ),
        (
            {"tfserving": {"signature": {}}},
            "unknown key tfserving.signature: did you mean tfserving.signatures?",
        ),
        (
            {"tfserving": {"signatures": {"r": {"methd": "regress"}}}},
            "unknown key tfserving.signatures.r.methd: did you mean tfserving.signatures.r.method?",
        ),
        ({"zzz": 1}, "unknown key zzz (known here: runtime, class, max_batch_size,"),
    ],
)
def test_an_unknown_key_at_any_level_is_named_with_the_closest(
    keys: dict[str, Any], message: str
) -> None:
    assert message in refused(**keys)


@pytest.mark.parametrize(
    ("runtime", "parameters", "message"),
    [
        ("onnx", {"intra_op_thread": 2}, "parameters.intra_op_thread: did you mean"),
        ("onnx", {"intra_op_threads": "2"}, "parameters.intra_op_threads: expected an integer"),
        ("onnx", {"providers": []}, "parameters.providers: expected a list of text (at least"),
        ("sklearn", {"fiel": "m.joblib"}, "unknown key parameters.fiel: did you mean"),
        ("llm", {"max_num_seq": 4}, "did you mean parameters.max_num_seqs?"),
        ("llm", {"dtype": "fp16"}, "parameters.dtype: 'fp16' is not one of float32, float16"),
        ("llm", {"max_num_seqs": 0}, "parameters.max_num_seqs: expected an integer from 1 to"),
        ("llm", {"vllm_stream_format": "mindy"}, "did you mean mindie?"),
    ],
)
def test_runtime_parameters_are_checked_against_the_runtime(
    runtime: str, parameters: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"runtime": runtime, "parameters": parameters})
    assert message in str(info.value)


def test_python_parameters_stay_free_form() -> None:
    anything = {"hold": "/tmp/x", "nested": {"any": [1, "two"]}, "max_num_seq": 3}
    assert parse_config({"runtime": "python", "parameters": anything}).parameters == anything


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"max_batch_size": "8"}, "max_batch_size: expected an integer >= 0, got '8' (text)"),
        ({"max_batch_size": True}, "max_batch_size: expected an integer >= 0, got True"),
        ({"version_policy": {"latest": 0}}, "version_policy.latest: expected an integer >= 1"),
        ({"version_policy": {"all": False}}, "version_policy.all: only 'all: true'"),
        (
            {"version_policy": {"latest": 1, "all": True}},
            "version_policy: give exactly one of latest, all, specific",
        ),
        ({"version_policy": 1}, "version_policy: expected one of {latest: N}"),
        ({"isolation": "proces"}, "isolation: 'proces' is not one of thread, process: did you"),
        (
            {"runtime": "pyhton"},
            "runtime: 'pyhton' is not one of python, onnx, sklearn, llm, embedding, vllm, "
            "ensemble, torchserve: did",
        ),
        ({"inputs": [{**TENSOR, "datatype": "fp32"}]}, "did you mean FP32?"),
        ({"inputs": [{**TENSOR, "shape": [-2]}]}, "inputs[0].shape[0]: expected an integer >= -1"),
        ({"inputs": {"x": TENSOR}}, "inputs: expected a list of mappings {name, datatype, shape}"),
        ({"labels": {"stable": "one"}}, "labels.stable: expected an integer >= 0, got 'one'"),
        ({"class": 3}, "class: expected text, got 3 (an integer)"),
        ({"tfserving": {"signatures": {"r": {"method": "regres"}}}}, "did you mean regress?"),
    ],
)
def test_a_wrong_type_or_value_says_what_was_expected(keys: dict[str, Any], message: str) -> None:
    assert message in refused(**keys)


def test_every_mistake_is_named_at_once() -> None:
    message = refused(max_batch_sise=8, isolation="proces", instances=0)
    assert "did you mean max_batch_size?" in message
    assert "did you mean process?" in message
    assert "instances: expected an integer >= 1, got 0" in message


def test_a_very_wrong_file_names_the_first_mistakes_and_counts_the_rest() -> None:
    message = refused(**{f"key{i}": i for i in range(25)})
    assert message.count("unknown key") == 10
    assert message.endswith("; and 15 more")


def test_defaults_are_the_declared_ones() -> None:
    config = parse_config({"runtime": "python"})
    declared = {row.path: row for row in rows(MODEL_YAML)}
    assert declared["max_batch_size"].default == str(config.max_batch_size) == "0"
    assert declared["isolation"].default == config.isolation == "thread"
    assert (config.inputs, config.outputs, config.labels, config.parameters) == ((), (), {}, {})
    assert config.dynamic_batching is None
    assert config.version_policy.select([1, 2, 3]) == [3]
    assert (config.max_queue_size, config.timeout_us, config.instances) == (None, None, None)


def test_dynamic_batching_true_takes_the_declared_defaults() -> None:
    on = parse_config({"runtime": "python", "max_batch_size": 4, "dynamic_batching": True})
    empty = parse_config({"runtime": "python", "max_batch_size": 4, "dynamic_batching": {}})
    assert on.dynamic_batching == empty.dynamic_batching
    assert on.dynamic_batching is not None


def _model_yamls() -> list[Path]:
    return sorted([*EXAMPLES.glob("*/model.yaml"), *TEST_MODELS.glob("*/model.yaml")])


@pytest.mark.parametrize("path", _model_yamls(), ids=lambda p: p.parent.name)
def test_every_model_yaml_of_the_project_is_accepted(path: Path) -> None:
    parse_config(yaml.safe_load(path.read_text()))


def test_llm_defaults_are_the_engines() -> None:
    from rosettaserve.runtimes.llm.engine import EngineConfig

    engine = {f.name: f.default for f in dataclasses.fields(EngineConfig)}
    for key in LLM_PARAMETERS.keys:
        if key.name in engine and key.default is not None:
            assert key.default == engine[key.name], key.name


def test_default_files_are_the_runtimes() -> None:
    from rosettaserve.runtimes import onnx, sklearn

    for runtime, module in (("onnx", onnx), ("sklearn", sklearn)):
        declared = RUNTIMES[runtime].parameters
        assert declared is not None
        (file_key,) = [k for k in declared.keys if k.name == "file"]
        assert file_key.default == module.DEFAULT_FILE


READS = re.compile(
    r"""(?:params|options)\.(?:integer|string|number|strings|flag|get)\(\s*["'](\w+)["']"""
)


@pytest.mark.parametrize(
    ("runtime", "sources"),
    [("onnx", ["runtimes/onnx.py"]), ("llm", ["runtimes/llm/model.py", "protocols/vllm/rest.py"])],
)
def test_every_parameter_a_runtime_reads_is_declared(runtime: str, sources: list[str]) -> None:
    """A parameter read by a runtime but not declared would fail every model that sets it."""
    declared = RUNTIMES[runtime].parameters
    assert declared is not None
    package = Path(rosettaserve.__file__).parent
    read = {name for s in sources for name in READS.findall((package / s).read_text())}
    assert read, sources
    missing = read - set(declared.names())
    assert not missing, f"declare parameters {missing} in repository/model_yaml.py"
