"""Hugging Face text-embeddings-inference (TEI): ``POST /embed`` and ``POST /rerank``."""
