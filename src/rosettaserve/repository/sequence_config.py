"""model.yaml's checked ``sequence_batching`` as the scheduler's settings, with what the key
types cannot say alone (one strategy, one control per control input, each kind's fields)."""

from __future__ import annotations

from typing import Any

from rosettaserve.core.registry import SequenceBatching, SequenceControl, SequenceState
from rosettaserve.repository.declare import Problems

WHERE = "sequence_batching"


def sequence_batching(
    value: dict[str, Any] | None, max_batch_size: int, problems: Problems
) -> SequenceBatching | None:
    if value is None:
        return None
    if value.get("direct") is not None and value.get("oldest") is not None:
        problems.add(WHERE, "give one strategy: direct or oldest, not both")
    oldest = value.get("oldest") or {}
    preferred = oldest.get("preferred_batch_size") or []
    if any(p > max(1, max_batch_size) for p in preferred):
        problems.add(
            f"{WHERE}.oldest.preferred_batch_size",
            f"expected sizes from 1 to max_batch_size ({max_batch_size}), got {preferred}",
        )
    controls = [
        _control(item, f"{WHERE}.control_input[{i}]", problems)
        for i, item in enumerate(value["control_input"] or [])
    ]
    return SequenceBatching(
        idle_us=value["max_sequence_idle_microseconds"],
        strategy="oldest" if value.get("oldest") is not None else "direct",
        controls=tuple(c for c in controls if c is not None),
        states=tuple(_state(item) for item in value["state"] or [] if item),
        max_candidate_sequences=oldest.get("max_candidate_sequences") or max(1, max_batch_size),
        # unset: a full batch, as Triton fills it in (and its configuration shows it)
        preferred_batch_size=tuple(sorted(set(preferred))) or (max(1, max_batch_size),),
        max_queue_delay_us=oldest.get("max_queue_delay_microseconds", 0) or 0,
    )


def _control(item: dict[str, Any] | None, where: str, problems: Problems) -> SequenceControl | None:
    if not item or not item.get("control"):
        return None
    if len(item["control"]) != 1:
        problems.add(f"{where}.control", "give one control per control input")
        return None
    control = item["control"][0]
    if not control:
        return None
    kind = control["kind"].removeprefix("CONTROL_SEQUENCE_")
    if kind == "CORRID":
        if not control.get("data_type"):
            problems.add(f"{where}.control[0]", "CONTROL_SEQUENCE_CORRID needs data_type")
            return None
        return SequenceControl(item["name"], kind, datatype=control["data_type"])
    values = control.get("int32_false_true")
    if values is None or len(values) != 2:
        problems.add(
            f"{where}.control[0]",
            f"CONTROL_SEQUENCE_{kind} needs int32_false_true: [false, true] (two values)",
        )
        return None
    return SequenceControl(item["name"], kind, (values[0], values[1]))


def _state(item: dict[str, Any]) -> SequenceState:
    initial = item.get("initial_state")
    return SequenceState(
        input_name=item["input_name"],
        output_name=item["output_name"],
        datatype=item["data_type"],
        dims=tuple(item["dims"]),
        initial_dims=tuple(initial["dims"]) if initial else None,
    )
