"""TF Serving's view of versions: which one a request means, model status, and the error body."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import InvalidInput, ModelNotFound, ServingError
from rosettaserve.core.registry import ModelVersion, VersionState
from rosettaserve.core.status import ErrorKind
from rosettaserve.protocols.tfserving import schema
from rosettaserve.web.routing import HttpResponse

# Where TF's HTTP status differs from the shared status table for the same error kind.
_HTTP = {ErrorKind.METHOD_NOT_ALLOWED: 400}
_PRETTY = orjson.OPT_INDENT_2


@dataclass(init=False, slots=True)  # compiled, a dataclass's own __init__ stays interpreted
class Target:
    """What the URL names: a model, and a version or a label (or neither: the latest)."""

    model: str
    version: int | None
    label: str | None

    def __init__(self, model: str, version: int | None = None, label: str | None = None) -> None:
        self.model = model
        self.version = version
        self.label = label


def render_error(exc: ServingError) -> HttpResponse:
    """``{"error": "<message>"}``: TF's error body (no code name in it)."""
    body = orjson.dumps({"error": exc.message}, option=_PRETTY)
    return HttpResponse(_HTTP.get(exc.kind, exc.http_status), body, headers=exc.headers)


def pretty(doc: Any) -> HttpResponse:
    return HttpResponse(200, orjson.dumps(doc, option=_PRETTY))


def servable(dp: DataPlane, target: Target) -> ModelVersion:
    """The version a predict/classify/regress/metadata request means, with TF's errors."""
    version = target.version
    if target.label is not None:
        labelled = dp.registry.version_for_label(target.model, target.label)
        if labelled is None:
            raise InvalidInput(f"Unrecognized servable version label: {target.label}")
        version = int(labelled)
    versions = _versions(dp, target.model)  # oldest first; only a ready one serves
    if version is None:
        for mv in reversed(versions):
            if mv.ready:
                return mv
        raise ModelNotFound(f"Servable not found for request: Latest({target.model})")
    for mv in versions:
        if mv.ready and int(mv.version) == version:
            return mv
    raise ModelNotFound(f"Servable not found for request: Specific({target.model}, {version})")


def _versions(dp: DataPlane, model: str) -> list[ModelVersion]:
    try:
        return dp.model_versions(model)
    except ModelNotFound:
        return []


def model_status(dp: DataPlane, target: Target) -> dict[str, Any]:
    """GetModelStatusResponse: every version newest first (a label is ignored, as by TF)."""
    versions = _versions(dp, target.model)
    if not versions:
        raise ModelNotFound(f"Could not find any versions of model {target.model}")
    if target.version is not None:
        versions = [v for v in versions if int(v.version) == target.version]
        if not versions:
            raise ModelNotFound(f"Could not find version {target.version} of model {target.model}")
    ordered = sorted(versions, key=lambda v: int(v.version), reverse=True)
    return {"model_version_status": [_version_status(v) for v in ordered]}


def _version_status(mv: ModelVersion) -> dict[str, Any]:
    failed = mv.state is VersionState.UNAVAILABLE and bool(mv.reason)  # a failed load
    return {
        "version": mv.version,
        "state": schema.STATES[mv.state],
        "status": {
            "error_code": "UNKNOWN" if failed else "OK",
            "error_message": mv.reason if failed else "",
        },
    }
