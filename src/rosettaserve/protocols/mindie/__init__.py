"""MindIE native inference API (/infer, /infer_token) over the LLM engine."""
