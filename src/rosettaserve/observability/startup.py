"""What a person reads on start: one line per model, a summary, the URLs."""

from __future__ import annotations

import sys

from rosettaserve.core.registry import ModelVersion


def say(line: str) -> None:
    print(line, file=sys.stdout, flush=True)


def model_line(versions: list[ModelVersion]) -> str:
    first = versions[0]
    numbers = ",".join(v.version for v in versions)
    seconds = sum(v.load_seconds for v in versions)
    states = sorted({v.state.value for v in versions})
    line = (
        f"  model {first.name:<24} versions {numbers:<8} runtime {first.runtime:<8} "
        f"{'/'.join(states):<12} {seconds:6.2f}s"
    )
    reasons = {f"v{v.version}: {v.reason}" for v in versions if v.reason}
    if reasons:
        line += "  why: " + "; ".join(sorted(reasons))
    return line


def summary_line(all_versions: list[ModelVersion]) -> str:
    models = {v.name for v in all_versions}
    ready = sum(v.ready for v in all_versions)
    failed = len(all_versions) - ready
    text = f"{len(models)} models, {len(all_versions)} versions: {ready} ready"
    return text + (f", {failed} not ready (see above)" if failed else "")
