"""What grps REST and gRPC both call: model selection, predict, streaming, health, metadata.

One instance serves both transports, so the online flag is one flag.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import yaml

from rosettaserve.core.call import PROTOCOL
from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import (
    InvalidInput,
    ModelNotFound,
    ModelNotReady,
    ServingError,
    bounded,
)
from rosettaserve.core.registry import ModelVersion
from rosettaserve.core.status import ErrorKind
from rosettaserve.core.types import InferenceRequest, InferenceResponse
from rosettaserve.protocols.grps import convert

log = logging.getLogger("rosettaserve.grps")


class GrpsApi:
    def __init__(self, dp: DataPlane, default_model: str = "") -> None:
        self.dp = dp
        self.default_model = default_model
        self._online: bool | None = None  # None until online/offline: follow the server

    # -- health --------------------------------------------------------------------------------

    def set_online(self, online: bool) -> None:
        self._online = online

    def ready(self) -> bool:
        """The online flag; before anyone sets it, the server's own readiness (models loaded)."""
        return self.dp.ready() if self._online is None else self._online

    def readiness(self) -> Any:
        if self.ready():
            return convert.ok()
        why = "offline" if self._online is False else "models are still loading or failed to load"
        return convert.failure(ErrorKind.UNAVAILABLE.http, f"Service Unavailable: {why}")

    # -- model selection -----------------------------------------------------------------------

    def select(self, payload_model: str, query_model: str = "") -> tuple[str, str]:
        """(name, version) from `name` or `name-version`: payload, then ?model=, then default."""
        selector = payload_model or query_model or self.default_model
        if not selector:
            raise InvalidInput(
                "no model selected: set `model` (name or name-version) in the message or "
                "?model= in the URL, or start the server with --grps-default-model"
            )
        return self.split(selector)

    def split(self, selector: str) -> tuple[str, str]:
        registry = self.dp.registry
        if registry.versions(selector) is not None:
            return selector, ""
        name, dash, version = selector.rpartition("-")
        if dash and name and registry.versions(name) is not None:
            return name, registry.version_for_label(name, version) or version
        raise ModelNotFound(f"unknown model '{selector}' (select a model as name or name-version)")

    # -- inference -----------------------------------------------------------------------------

    def request(
        self, payload: convert.Payload, query_model: str = "", protocol: str = "grps"
    ) -> InferenceRequest:
        mv = self.dp.ready_version(*self.select(payload.model, query_model))
        inputs = convert.bind(payload, mv.name, list(mv.inputs))
        return InferenceRequest(
            model_name=mv.name,
            model_version=mv.version,
            inputs=inputs,
            context={PROTOCOL: protocol},
        )

    async def infer(
        self, payload: convert.Payload, query_model: str = "", protocol: str = "grps"
    ) -> InferenceResponse:
        return await self.dp.infer(await self._loaded_request(payload, query_model, protocol))

    async def infer_stream(
        self, payload: convert.Payload, query_model: str = "", protocol: str = "grps"
    ) -> AsyncIterator[InferenceResponse]:
        """Selection and binding fail at the first message, before any is sent; the model's
        own errors while iterating."""
        request = await self._loaded_request(payload, query_model, protocol)
        async for response in self.dp.infer_stream(request):
            yield response

    async def _loaded_request(
        self, payload: convert.Payload, query_model: str, protocol: str
    ) -> InferenceRequest:
        try:
            return self.request(payload, query_model, protocol)
        except ModelNotReady:  # it may load on demand (load: lazy, unloaded when idle): wait
            await self.dp.loaded_version(*self.select(payload.model, query_model))
            return self.request(payload, query_model, protocol)

    # -- metadata (YAML text) ------------------------------------------------------------------

    def server_metadata(self) -> str:
        info, registry = self.dp.info, self.dp.registry
        doc = {
            "server": {"name": info.name, "version": info.version, "extensions": info.extensions},
            "grps": {"default_model": self.default_model or None, "online": self.ready()},
            "models": [
                {"model": f"{v.name}-{v.version}", "state": v.state.value, "runtime": v.runtime}
                for name in registry.model_names()
                for v in registry.versions(name) or []
            ],
        }
        return yaml.safe_dump(doc, sort_keys=False)

    def model_metadata(self, msg: Any, query_model: str = "") -> str:
        """The model named by str_data (grps's way), else selected as predict selects it."""
        if msg.str_data:
            name, version = self.split(msg.str_data)
        else:
            name, version = self.select(msg.model, query_model)
        mv = self.dp.resolve(name, version)
        return yaml.safe_dump(model_doc(mv, self.dp.model_versions(name)), sort_keys=False)


def model_doc(mv: ModelVersion, versions: list[ModelVersion]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": mv.name,
        "version": mv.version,
        "model": f"{mv.name}-{mv.version}",
        "versions": [v.version for v in versions],
        "state": mv.state.value,
        "runtime": mv.runtime,
        "platform": mv.platform or mv.runtime,
        "max_batch_size": mv.max_batch_size,
        "streaming": bool(mv.invoker is not None and mv.invoker.streams),
        "labels": list(mv.labels),
        "inputs": [_spec(s) for s in mv.inputs],
        "outputs": [_spec(s) for s in mv.outputs],
    }
    if mv.reason:
        doc["reason"] = mv.reason
    return doc


def _spec(spec: Any) -> dict[str, Any]:
    return {"name": spec.name, "datatype": spec.datatype, "shape": list(spec.shape)}


def failure_for(exc: Exception) -> Any:
    """Any error as a FAILURE reply: a ServingError by the status table, anything else a 500."""
    if isinstance(exc, ServingError):
        return convert.error_message(exc)
    log.error("unhandled error in a grps request", exc_info=exc)
    message = bounded(f"internal error: {type(exc).__name__}: {exc}")
    return convert.failure(ErrorKind.INTERNAL.http, message)
