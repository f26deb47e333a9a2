"""Triton generate extension (/v2/models/{m}/generate[_stream]) over the LLM engine."""
