"""Ollama's API: generate, chat, embeddings and the model routes (see docs/ollama.md)."""
