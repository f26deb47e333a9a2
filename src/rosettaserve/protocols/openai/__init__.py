"""OpenAI-compatible chat and completions over the LLM engine."""
