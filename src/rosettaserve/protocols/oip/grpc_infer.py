"""ModelInfer, the rpc of every small gRPC inference, compiled (scripts/compile_native.py):
bytes in, bytes out (``grpc_wire``), the data plane in between. ``grpc.OipServicer`` serves it;
the servicer's module is not compiled (its streaming rpc is an async generator), and run from
there, each call cost an interpreted coroutine and a Python frame more [cost: grpc-infer]."""

from __future__ import annotations

from time import perf_counter_ns
from typing import Any

from rosettaserve.core.call import TIMEOUT_US
from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.executor import LargeWork, run_request_work
from rosettaserve.core.types import InferenceRequest
from rosettaserve.protocols.oip import answer_tier
from rosettaserve.protocols.oip.convert import answered_by_extensions
from rosettaserve.protocols.oip.grpc_wire import model_named, reply_bytes, request_from
from rosettaserve.protocols.oip.requested import answer


async def model_infer(dp: DataPlane, request: bytes, context: Any) -> bytes:
    """One ModelInfer call: ``context`` is the call's (its deadline)."""
    found = None
    if dp.answers_cached:  # (a server without a response cache never looks)
        start = perf_counter_ns()
        found = answer_tier.slot(dp, "oip_grpc", model_named(request), None, request)
        if found is not None:
            kept = answer_tier.hit(dp, found, start)
            if kept is not None:
                return kept[0]
    try:
        core = request_from(request, True)
    except LargeWork:  # contents too large to decode on the event loop
        core = await run_request_work(request_from, request, False)
    response = await dp.infer(within_deadline(core, context))
    if answered_by_extensions(core):
        answer(dp, core, response)
    try:
        reply = reply_bytes(response, True)
    except LargeWork:  # a BYTES output too large to encode on the event loop
        reply = await run_request_work(reply_bytes, response, False)
    if found is not None:
        found.keep(reply, [], None)
    return reply


def within_deadline(request: InferenceRequest, context: Any) -> InferenceRequest:
    """The client's gRPC deadline, when it set one, bounds the request's timeout too."""
    remaining = context.time_remaining()
    if remaining is not None:
        deadline_us = max(1, int(remaining * 1e6))
        own = request.context.get(TIMEOUT_US)
        request.context[TIMEOUT_US] = min(own, deadline_us) if own else deadline_us
    return request
