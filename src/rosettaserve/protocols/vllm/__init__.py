"""vLLM simple API server (/generate with a prompt) over the LLM engine."""
