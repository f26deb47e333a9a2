"""The ``llm`` runtime: a generation engine with continuous batching over a transformers model."""

from rosettaserve.runtimes.llm.model import LlmModel

__all__ = ["LlmModel"]
