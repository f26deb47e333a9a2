"""runtimes/onnx.py: the session options a model.yaml's parameters give."""

from __future__ import annotations

from typing import Any

import pytest

from rosettaserve.repository.config import ConfigError, parse_config
from rosettaserve.runtimes.onnx import session_options

pytest.importorskip("onnxruntime")

SPIN_KEYS = ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning")


@pytest.mark.parametrize(
    ("parameters", "spins"),
    [({}, "0"), ({"allow_spinning": False}, "0"), ({"allow_spinning": True}, "1")],
    ids=["default", "off", "on"],
)
def test_pool_threads_spin_only_when_asked(parameters: dict[str, Any], spins: str) -> None:
    options = session_options(parameters)
    assert [options.get_session_config_entry(k) for k in SPIN_KEYS] == [spins, spins]


def test_threads_are_the_ones_asked_for() -> None:
    options = session_options({"intra_op_threads": 3, "inter_op_threads": 2})
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (3, 2)


def test_allow_spinning_is_a_declared_onnx_parameter() -> None:
    config = parse_config({"runtime": "onnx", "parameters": {"allow_spinning": True}})
    assert config.parameters["allow_spinning"] is True
    with pytest.raises(ConfigError, match="allow_spinning: expected true or false"):
        parse_config({"runtime": "onnx", "parameters": {"allow_spinning": "yes"}})
