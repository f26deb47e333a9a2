"""Scheduling: the dynamic batcher (wraps a model's invoker) and worker processes."""
