from __future__ import annotations

from collections.abc import Iterator

import pytest

from rosettaserve.runtimes.llm import LlmModel
from tests.llmmodel import load_llm


@pytest.fixture(scope="module")
def llm() -> Iterator[LlmModel]:
    """The tiny example Llama with its default parameters, shared by a module's tests."""
    model = load_llm()
    yield model
    model.unload()
