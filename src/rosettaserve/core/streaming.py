"""The streaming paths of the invoker and the data plane.

They are async generators, which mypyc does not compile, so they live apart from the compiled
request path (``scripts/compile_native.py``): ``Invoker.stream``, ``Batcher.stream`` and
``DataPlane.infer_stream`` return what these functions make.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

from rosettaserve.core.call import Call
from rosettaserve.core.errors import ModelErrors, ServingError
from rosettaserve.core.model import Arrays
from rosettaserve.core.queue_limit import release

if TYPE_CHECKING:
    from rosettaserve.core.dataplane import DataPlane
    from rosettaserve.core.invoker import Invoker
    from rosettaserve.core.types import InferenceRequest, InferenceResponse


async def close_stream(stream: AsyncIterator[Any]) -> None:
    """A stream its reader leaves before its end (the answer to HEAD, a call that ended, a
    client gone): its clean-up (``finally`` blocks, ``with`` blocks) runs now, not whenever the
    garbage collector finds it."""
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


async def model_items(
    invoker: Invoker, inputs: Arrays, parameters: dict[str, Any]
) -> AsyncIterator[Any]:
    """What a model's predict yields, one item at a time (a plain predict: its one answer)."""
    kwargs = invoker.kwargs(parameters)
    with ModelErrors(invoker.label):
        if invoker.is_async_gen:
            async for item in invoker.fn(inputs, **kwargs):
                yield item
            return
        if not invoker.is_gen:
            yield await invoker.predict(inputs, parameters)
            return
        run = invoker.instances.run
        gen = iter(await run(invoker.fn, inputs, **kwargs))
        done = object()
        while (item := await run(next, gen, done)) is not done:
            yield item


async def one(predict: Callable[..., Awaitable[Any]], *args: Any) -> AsyncIterator[Any]:
    """A stream of one item: what ``predict(*args)`` answers (called when the stream starts)."""
    yield await predict(*args)


async def responses(dp: DataPlane, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
    """``DataPlane.infer_stream``: one response per item the model yields."""
    from rosettaserve.core.dataplane import input_arrays, prepare
    from rosettaserve.core.outputs import to_response

    mv = await dp.loaded_version(request.model_name, request.model_version)
    call = Call(perf_counter_ns())
    held = None  # counted against the queue limit by its key (core/queue_limit.py)
    try:
        invoker = prepare(mv, request)
        held = dp.admit(mv, invoker)
        with mv.in_use():
            call.submitted = call.ran = perf_counter_ns()
            async for result in invoker.stream(input_arrays(request), request.parameters, call):
                yield to_response(mv, request, result)
    except ServingError as exc:
        dp.failed(mv, request, call, exc.kind.name.lower())
        raise
    except (asyncio.CancelledError, GeneratorExit):  # the client went away mid-stream
        dp.failed(mv, request, call, "cancelled")
        raise
    finally:
        release(mv, held)
    call.done = perf_counter_ns()
    dp.succeeded(mv, request, call, call.done)
