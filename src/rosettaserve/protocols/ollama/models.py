"""Ollama's model routes: ``GET /api/tags``, ``POST /api/show``, ``GET /api/ps``,
``GET /api/version``, and the model-management routes this server does not build (the model
repository is where models come from): ``/api/pull``, ``/api/push``, ``/api/create``,
``/api/copy``, ``/api/delete`` answer 501.

A model is listed as ``NAME:latest`` (its highest ready version); ``NAME``, ``NAME:latest`` and
``NAME:<version>`` name it in requests. Sizes and digests are not known here: 0 and "".
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rosettaserve.core import embedding
from rosettaserve.core.errors import InvalidInput, ModelNotFound, Unsupported
from rosettaserve.core.generate import TextGenerator, json_object
from rosettaserve.core.generation_plane import GenerationPlane, Split
from rosettaserve.core.registry import ModelVersion
from rosettaserve.protocols.llm_http import Endpoint
from rosettaserve.protocols.ollama import schema
from rosettaserve.web.routing import HttpRequest, HttpResponse, json_response

API_VERSION = "0.12.0"  # the Ollama API version whose routes and shapes are served
NOT_BUILT = ("/api/pull", "/api/push", "/api/create", "/api/copy")


def _time(unix: int) -> str:
    return datetime.fromtimestamp(unix, UTC).isoformat().replace("+00:00", "Z")


def _served(plane: GenerationPlane) -> list[tuple[ModelVersion, dict[str, Any]]]:
    """Every model an Ollama client may use: (version, what the routes say of it)."""
    out: list[tuple[ModelVersion, dict[str, Any]]] = []
    for mv, gen in plane.generators():
        out.append((mv, _facts(mv, gen.info.created, gen.info.max_model_len, _caps(gen))))
    for mv, info in embedding.served(plane.dataplane):
        if info.task == embedding.EMBED:
            out.append((mv, _facts(mv, info.created, info.max_tokens, ["embedding"])))
    return out


def _caps(gen: TextGenerator) -> list[str]:
    return ["completion", "tools"] if gen.info.options.get("tool_parser") else ["completion"]


def _facts(mv: ModelVersion, created: int, window: int, caps: list[str]) -> dict[str, Any]:
    return {"created": created, "window": window, "capabilities": caps}


def _details(mv: ModelVersion) -> dict[str, Any]:
    return {
        "parent_model": "",
        "format": mv.runtime,
        "family": "",
        "families": None,
        "parameter_size": "",
        "quantization_level": "",
    }


def _listed(mv: ModelVersion, facts: dict[str, Any]) -> dict[str, Any]:
    name = f"{mv.name}:latest"
    return {
        "name": name,
        "model": name,
        "modified_at": _time(facts["created"]),
        "size": 0,
        "digest": "",
        "details": _details(mv),
    }


async def tags(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    return json_response({"models": [_listed(mv, f) for mv, f in _served(plane)]})


async def ps(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    """The served models with the memory each holds (measured at its load; ``expires_at``
    null: keep_alive does not unload here)."""
    models = [
        _listed(mv, f)
        | {
            "size": mv.resident_bytes,
            "expires_at": None,
            "size_vram": 0,
            "context_length": f["window"],
        }
        for mv, f in _served(plane)
    ]
    return json_response({"models": models})


async def show(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    doc = json_object(req.body)
    name = doc.get("model") or doc.get("name")  # (older clients send name)
    if not isinstance(name, str) or not name:
        raise InvalidInput("model is required")
    base, version = schema.split_name(name)
    for mv, facts in _served(plane):
        if mv.name == base and version in ("", mv.version):
            return json_response(
                {
                    "modelfile": "",
                    "parameters": "",
                    "template": "",
                    "details": _details(mv),
                    "model_info": {"general.context_length": facts["window"]},
                    "capabilities": facts["capabilities"],
                    "modified_at": _time(facts["created"]),
                }
            )
    raise ModelNotFound(f'model "{name}" not found, try pulling it first')


async def version(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    return json_response({"version": API_VERSION})


async def not_built(plane: GenerationPlane, req: HttpRequest, split: Split | None) -> HttpResponse:
    raise Unsupported(
        f"{req.path} is not supported by this server: models come from its model repository "
        "(model.yaml), not from a registry"
    )


WHOLE = [
    Endpoint("GET", "/api/tags", tags),
    Endpoint("GET", "/api/ps", ps),
    Endpoint("GET", "/api/version", version),
    Endpoint("POST", "/api/show", show),
    *(Endpoint("POST", path, not_built) for path in NOT_BUILT),
    Endpoint("DELETE", "/api/delete", not_built),
]
