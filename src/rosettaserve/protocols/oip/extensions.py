"""Triton's model configuration, statistics and repository documents, built once for REST and gRPC.

REST sends these dicts as JSON; gRPC parses the same dicts into the protobuf messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rosettaserve.core.errors import Unsupported
from rosettaserve.core.registry import (
    CLASS_LABELS,
    ModelVersion,
    SequenceBatching,
    SequenceControl,
)
from rosettaserve.core.stats import Duration
from rosettaserve.core.types import TensorSpec


def config_type(datatype: str) -> str:
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def model_config(mv: ModelVersion) -> dict[str, Any]:
    """Triton's ModelConfig: dims exclude the batch dim when max_batch_size > 0; an output's
    ``label_filename`` and ``response_cache`` when the version has them, as Triton shows them."""
    batch = mv.max_batch_size

    def dims(spec: TensorSpec) -> list[int]:
        return list(spec.shape[1:] if batch > 0 and spec.shape else spec.shape)

    # labels.txt names the classes of every output (Triton names a file per output)
    labelled = {"label_filename": CLASS_LABELS} if mv.class_labels else {}

    doc: dict[str, Any] = {
        "name": mv.name,
        "platform": mv.platform or mv.runtime,
        "backend": mv.runtime,
        "max_batch_size": batch,
        "input": [
            {"name": s.name, "data_type": config_type(s.datatype), "dims": dims(s)}
            for s in mv.inputs
        ],
        "output": [
            {"name": s.name, "data_type": config_type(s.datatype), "dims": dims(s), **labelled}
            for s in mv.outputs
        ],
    }
    if mv.response_cache:
        doc["response_cache"] = {"enable": True}
    if mv.invoker is not None and mv.invoker.streams:
        doc["model_transaction_policy"] = {"decoupled": True}
    if mv.dynamic_batching is not None:
        doc["dynamic_batching"] = dynamic_batching(mv)
    if mv.sequence_batching is not None:
        doc["sequence_batching"] = sequence_batching(mv.sequence_batching)
    if mv.platform == "ensemble" and mv.model is not None:  # (runtimes/ensemble.py's steps)
        steps = getattr(mv.model, "steps", [])
        doc["ensemble_scheduling"] = {"step": [ensemble_step(s) for s in steps]}
    return doc


def sequence_batching(settings: SequenceBatching) -> dict[str, Any]:
    """Triton's ModelSequenceBatching (perf_analyzer tells a sequence model by it)."""
    doc: dict[str, Any] = {
        "max_sequence_idle_microseconds": settings.idle_us,
        "control_input": [{"name": c.name, "control": [_control(c)]} for c in settings.controls],
        "state": [
            {
                "input_name": s.input_name,
                "output_name": s.output_name,
                "data_type": config_type(s.datatype),
                "dims": list(s.dims),
                "initial_state": []
                if s.initial_dims is None
                else [
                    {
                        "data_type": config_type(s.datatype),
                        "dims": list(s.initial_dims),
                        "zero_data": True,
                    }
                ],
            }
            for s in settings.states
        ],
    }
    if settings.strategy == "oldest":
        doc["oldest"] = {
            "max_candidate_sequences": settings.max_candidate_sequences,
            "preferred_batch_size": list(settings.preferred_batch_size),
            "max_queue_delay_microseconds": settings.max_queue_delay_us,
        }
    else:
        doc["direct"] = {}
    return doc


def _control(control: SequenceControl) -> dict[str, Any]:
    kind = f"CONTROL_SEQUENCE_{control.kind}"
    if control.kind == "CORRID":
        return {"kind": kind, "data_type": config_type(control.datatype)}
    return {"kind": kind, "int32_false_true": list(control.false_true)}


def ensemble_step(step: Any) -> dict[str, Any]:
    """Triton's ModelEnsembling.Step."""
    return {
        "model_name": step.model,
        "model_version": -1 if step.version is None else int(step.version),
        "input_map": dict(step.input_map),
        "output_map": dict(step.output_map),
    }


def dynamic_batching(mv: ModelVersion) -> dict[str, Any]:
    """Triton's ModelDynamicBatching; the queue policy holds what model.yaml sets itself."""
    assert mv.dynamic_batching is not None
    policy: dict[str, Any] = {"allow_timeout_override": True}
    if mv.max_queue_size is not None:
        policy["max_queue_size"] = mv.max_queue_size
    if mv.timeout_us is not None:
        policy["default_timeout_microseconds"] = mv.timeout_us
    return {
        "preferred_batch_size": list(mv.dynamic_batching.preferred_batch_size),
        "max_queue_delay_microseconds": mv.dynamic_batching.max_queue_delay_microseconds,
        "default_queue_policy": policy,
    }


def _duration(d: Duration) -> dict[str, int]:
    return {"count": d.count, "ns": d.ns}


def model_statistics(mv: ModelVersion) -> dict[str, Any]:
    s = mv.stats
    return {
        "name": mv.name,
        "version": mv.version,
        "last_inference": s.last_inference_ms,
        "inference_count": s.inference_count,
        "execution_count": s.execution_count,
        "inference_stats": {
            "success": _duration(s.success),
            "fail": _duration(s.fail),
            "queue": _duration(s.queue),
            "compute_input": _duration(s.compute_input),
            "compute_infer": _duration(s.compute_infer),
            "compute_output": _duration(s.compute_output),
            "cache_hit": _duration(s.cache_hit),
            "cache_miss": _duration(s.cache_miss),
        },
        "batch_stats": [
            {
                "batch_size": size,
                "compute_input": _duration(b.compute_input),
                "compute_infer": _duration(b.compute_infer),
                "compute_output": _duration(b.compute_output),
            }
            for size, b in sorted(s.batches.items())
        ],
        "memory_usage": [],
    }


def refuse_load_parameters(parameters: Iterable[str]) -> None:
    for key in parameters:
        if key == "config" or key.startswith("file:"):
            raise Unsupported(
                f"load parameter '{key}' is not supported: this server loads models only "
                "from the folders of its repository"
            )
