"""Open Inference Protocol over gRPC (Triton's GRPCInferenceService): each rpc a few lines."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from google.protobuf.json_format import ParseDict

from rosettaserve.core import share
from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.errors import ServingError, Unsupported
from rosettaserve.core.executor import LargeWork, run_request_work
from rosettaserve.observability.access_log import model_path, named_in
from rosettaserve.observability.log_settings import LogSettings
from rosettaserve.observability.trace_settings import TraceSettings
from rosettaserve.protocols.oip import convert, extensions, requested, settings, shared_memory
from rosettaserve.protocols.oip.grpc_convert import encode_infer, parameters_from, parse_infer
from rosettaserve.protocols.oip.grpc_infer import model_infer
from rosettaserve.protocols.oip.grpc_wire import model_named
from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb
from rosettaserve.protocols.oip.rest import CUDA_REFUSAL
from rosettaserve.web.grpc_services import CallTracker

SERVICE = "inference.GRPCInferenceService"
EMPTY_FINAL = "triton_enable_empty_final_response"
FINAL_FLAG = "triton_final_response"


class OipServicer:
    def __init__(
        self,
        dp: DataPlane,
        tracker: CallTracker,
        logs: LogSettings | None = None,
        traces: TraceSettings | None = None,
    ) -> None:
        self.dp = dp
        self.tracker = tracker
        self.logs = logs  # the logging extension's settings (None: not served)
        self.traces = traces  # the trace extension's (None: not served)
        # bytes in and out (grpc_wire), run compiled: protocols/oip/grpc_infer.py
        self.ModelInfer = partial(model_infer, dp)

    @staticmethod
    def model_of(request: Any) -> str:
        """The model a request names, for the access line (the transport asks only when the
        access log is on): ModelInfer's bytes skimmed, other requests' fields read."""
        if isinstance(request, bytes):
            return model_path(*model_named(request))
        return named_in(request)

    async def ServerLive(self, request: Any, context: Any) -> Any:
        return pb.ServerLiveResponse(live=self.dp.live())

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return pb.ServerReadyResponse(ready=self.dp.ready())

    async def ModelReady(self, request: Any, context: Any) -> Any:
        return pb.ModelReadyResponse(ready=self.dp.resolve(request.name, request.version).ready)

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        info = self.dp.info
        return pb.ServerMetadataResponse(
            name=info.name, version=info.version, extensions=info.extensions
        )

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        mv = self.dp.resolve(request.name, request.version)
        doc = convert.model_metadata(mv, self.dp.model_versions(request.name))
        return ParseDict(doc, pb.ModelMetadataResponse())

    async def ModelStreamInfer(
        self, requests: AsyncIterator[Any], context: Any
    ) -> AsyncIterator[Any]:
        """Errors travel in-band (error_message) and the stream stays open. Each message has
        the stream's share (its key, its x-priority) with its own priority parameter: one
        message's does not carry over to the next (they run in one task's context)."""
        stream_share = share.SHARE.get()
        async for request in requests:
            share.SHARE.set(stream_share)
            with self.tracker.busy():  # an idle open stream does not hold shutdown back
                try:
                    async for reply in self._stream_one(request):
                        yield reply
                except ServingError as exc:
                    yield pb.ModelStreamInferResponse(error_message=exc.message)

    async def _stream_one(self, request: Any) -> AsyncIterator[Any]:
        empty_final = bool(parameters_from(request.parameters).get(EMPTY_FINAL))
        try:
            core_request = parse_infer(request, True)
        except LargeWork:  # a BYTES tensor too large to decode on the event loop
            core_request = await run_request_work(parse_infer, request, False)
        if share.PRIORITY in core_request.context:  # OIP's priority parameter (core/share.py)
            share.prioritise(core_request.context[share.PRIORITY])
        mv = await self.dp.loaded_version(core_request.model_name, core_request.model_version)
        decoupled = mv.invoker is not None and mv.invoker.streams
        async for response in self.dp.infer_stream(core_request):
            if convert.answered_by_extensions(core_request):
                requested.answer(self.dp, core_request, response)
            try:
                msg = encode_infer(response, True)
            except LargeWork:  # a BYTES output too large to encode on the event loop
                msg = await run_request_work(encode_infer, response, False)
            if empty_final:
                msg.parameters[FINAL_FLAG].bool_param = not decoupled
            yield pb.ModelStreamInferResponse(infer_response=msg)
        if empty_final and decoupled:
            final = pb.ModelInferResponse(
                model_name=mv.name, model_version=mv.version, id=request.id
            )
            final.parameters[FINAL_FLAG].bool_param = True
            yield pb.ModelStreamInferResponse(infer_response=final)

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        mv = self.dp.resolve(request.name, request.version)
        return ParseDict({"config": extensions.model_config(mv)}, pb.ModelConfigResponse())

    async def ModelStatistics(self, request: Any, context: Any) -> Any:
        stats = [
            extensions.model_statistics(v)
            for v in self.dp.select_versions(request.name, request.version)
        ]
        return ParseDict({"model_stats": stats}, pb.ModelStatisticsResponse())

    async def LogSettings(self, request: Any, context: Any) -> Any:
        if self.logs is None:
            raise Unsupported("the logging extension is not served here")
        return settings.log_settings(self.logs, request)

    async def TraceSetting(self, request: Any, context: Any) -> Any:
        if self.traces is None:
            raise Unsupported("the trace extension is not served here")
        return settings.trace_setting(self.dp, self.traces, request)

    async def RepositoryIndex(self, request: Any, context: Any) -> Any:
        rows = self.dp.repository_index(request.ready)
        return pb.RepositoryIndexResponse(
            models=[
                pb.RepositoryIndexResponse.ModelIndex(
                    name=r.name, version=r.version, state=r.state, reason=r.reason
                )
                for r in rows
            ]
        )

    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        extensions.refuse_load_parameters(request.parameters)
        await self.dp.load_model(request.model_name)
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
        await self.dp.unload_model(request.model_name)
        return pb.RepositoryModelUnloadResponse()

    async def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        reply = pb.SystemSharedMemoryStatusResponse()
        for doc in shared_memory.REGIONS.status(request.name):
            reply.regions[doc["name"]].CopyFrom(
                pb.SystemSharedMemoryStatusResponse.RegionStatus(**doc)
            )
        return reply

    async def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        shared_memory.REGIONS.register(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        shared_memory.REGIONS.unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    async def CudaSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        if request.name:
            raise Unsupported(CUDA_REFUSAL)
        return pb.CudaSharedMemoryStatusResponse()  # none registered: there can be none

    async def CudaSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        raise Unsupported(CUDA_REFUSAL)

    async def CudaSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        return pb.CudaSharedMemoryUnregisterResponse()  # nothing to unregister (Triton's OK)


# rpc name -> (request type, response type, client streams and server streams)
RPCS: dict[str, tuple[Any, Any, bool]] = {
    "ServerLive": (pb.ServerLiveRequest, pb.ServerLiveResponse, False),
    "ServerReady": (pb.ServerReadyRequest, pb.ServerReadyResponse, False),
    "ModelReady": (pb.ModelReadyRequest, pb.ModelReadyResponse, False),
    "ServerMetadata": (pb.ServerMetadataRequest, pb.ServerMetadataResponse, False),
    "ModelMetadata": (pb.ModelMetadataRequest, pb.ModelMetadataResponse, False),
    "ModelInfer": (bytes, bytes, False),
    "ModelStreamInfer": (pb.ModelInferRequest, pb.ModelStreamInferResponse, True),
    "ModelConfig": (pb.ModelConfigRequest, pb.ModelConfigResponse, False),
    "ModelStatistics": (pb.ModelStatisticsRequest, pb.ModelStatisticsResponse, False),
    "RepositoryIndex": (pb.RepositoryIndexRequest, pb.RepositoryIndexResponse, False),
    "RepositoryModelLoad": (pb.RepositoryModelLoadRequest, pb.RepositoryModelLoadResponse, False),
    "RepositoryModelUnload": (
        pb.RepositoryModelUnloadRequest,
        pb.RepositoryModelUnloadResponse,
        False,
    ),
    "LogSettings": (pb.LogSettingsRequest, pb.LogSettingsResponse, False),
    "TraceSetting": (pb.TraceSettingRequest, pb.TraceSettingResponse, False),
}
for _kind in ("System", "Cuda"):
    for _call in ("Status", "Register", "Unregister"):
        _rpc = f"{_kind}SharedMemory{_call}"
        RPCS[_rpc] = (getattr(pb, _rpc + "Request"), getattr(pb, _rpc + "Response"), False)
