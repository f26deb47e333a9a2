"""Open Inference Protocol (KServe V2)."""
