"""Hugging Face TGI routes over the LLM engine."""
