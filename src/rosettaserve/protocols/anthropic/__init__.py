"""Anthropic's Messages API over the LLM engine."""
