"""The vLLM runtime's sampling parameters: what the families' reader accepted, as vLLM's
``SamplingParams``; what a vLLM version refuses besides is the client's 400, not a 500.

vLLM is not installed where these tests run: a stand-in module records the arguments and
refuses as vLLM's ``_verify_args`` does for the ranges a newer vLLM narrowed (temperature)."""

from __future__ import annotations

import enum
import sys
import types
from typing import Any

import pytest

from rosettaserve.core.errors import InvalidInput
from rosettaserve.runtimes.vllm.stream import vllm_sampling
from tests.sampling_readers import READERS


class FakeVllmParams:
    def __init__(self, **kw: Any) -> None:
        if not 0.0 <= kw["temperature"] <= 2.0:
            raise ValueError(f"temperature must be in [0, 2], got {kw['temperature']}.")
        self.kw = kw


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("vllm.sampling_params")
    module.SamplingParams = FakeVllmParams  # type: ignore[attr-defined]
    module.RequestOutputKind = enum.Enum("RequestOutputKind", "CUMULATIVE DELTA FINAL_ONLY")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", module)


@pytest.mark.usefixtures("fake_vllm")
@pytest.mark.parametrize("family", READERS)
def test_vllm_gets_the_values_the_reader_made_safe(family: str) -> None:
    doc = {"temperature": 1e-300, "top_p": 0.5, "top_k": 3, "repetition_penalty": 5e-324}
    made = vllm_sampling(READERS[family](doc), 1, 8)
    assert (made.kw["temperature"], made.kw["top_p"], made.kw["top_k"]) == (0.0, 1.0, 0)
    assert made.kw["repetition_penalty"] > 0.0


@pytest.mark.usefixtures("fake_vllm")
def test_what_vllm_refuses_is_the_clients_400() -> None:
    params = READERS["tgi"]({"temperature": 50.0})  # TGI's range; newer vLLM's ends at 2
    with pytest.raises(InvalidInput, match="vLLM refused the sampling parameters: temperature"):
        vllm_sampling(params, 1, 8)
