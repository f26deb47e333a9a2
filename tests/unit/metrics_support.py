"""What the unit tests of /metrics share: the exposition read back sample by sample with
prometheus_client's own parser, and a registry of one model version for a data plane to serve."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from rosettaserve.core.registry import ModelVersion

Key = tuple[str, tuple[tuple[str, str], ...]]  # a sample's name and its sorted labels


def samples(text: bytes) -> dict[Key, float]:
    """Every sample of the exposition, keyed by name and sorted labels."""
    found = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


class OneModel:
    """A registry of one model version."""

    def __init__(self, mv: ModelVersion) -> None:
        self.mv = mv

    def model_names(self) -> list[str]:
        return [self.mv.name]

    def versions(self, name: str) -> list[ModelVersion] | None:
        return [self.mv] if name == self.mv.name else None

    def version_for_label(self, name: str, label: str) -> str | None:
        return None
