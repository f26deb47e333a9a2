"""What a response-cache hit costs against running a small identity model, in-process.

    .venv/bin/python bench/response_cache_cost.py [--number 20000] [--repeat 7]

Times ``DataPlane.infer`` (validation, the invoker, the answer built from what the model
returned) on the python ``identity`` model of bench/compare (FP32 [1,4] in, the same out): the
model run on each request (no cache), and answered from the response cache (every request after
the first a hit: the key's hash, the lookup, the whole key compared). The same again
with a [1,262144] input (1 MiB), where the key's bytes are hashed and compared. Then the OIP
REST route (``infer``: the body parsed, the answer encoded) with the FP32 [1,4] JSON request: the
model run, a hit of the tensor cache, and a hit of the first tier (protocols/oip/answer_tier.py:
the encoded answer found by the body's bytes). Prints the best of ``--repeat`` rounds, in
microseconds per request, and each hit's cost over the model's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import numpy as np

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.invoker import Invoker
from rosettaserve.core.model import Model
from rosettaserve.core.registry import ModelVersion, VersionState
from rosettaserve.core.types import InferenceRequest, Tensor, TensorSpec
from rosettaserve.protocols.oip.rest import infer_routes
from rosettaserve.scheduling.response_cache import CachedInvoker, ResponseCache
from rosettaserve.web.routing import HttpRequest

SPEC_IN = [TensorSpec("INPUT0", "FP32", (-1, -1))]
SPEC_OUT = [TensorSpec("OUTPUT0", "FP32", (-1, -1))]


class Identity(Model):
    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"OUTPUT0": inputs["INPUT0"]}


class OneModel:
    def __init__(self, mv: ModelVersion) -> None:
        self.mv = mv

    def model_names(self) -> list[str]:
        return ["identity"]

    def versions(self, name: str) -> list[ModelVersion] | None:
        return [self.mv]

    def version_for_label(self, name: str, label: str) -> str | None:
        return None


def plane(cached: bool, tier: bool = False) -> DataPlane:
    model = Identity("identity", "1")
    mv = ModelVersion("identity", "1", "python", VersionState.READY, model=model)
    mv.inputs, mv.outputs = SPEC_IN, SPEC_OUT
    invoker: Any = Invoker(model)
    if cached:
        invoker = CachedInvoker(invoker, ResponseCache(1 << 30), mv)
        mv.response_cache = True
        mv.answers = invoker if tier else None
    mv.invoker = invoker
    dp = DataPlane(OneModel(mv))
    dp.started = True
    dp.answers_cached = tier
    return dp


def per_request(dp: DataPlane, data: np.ndarray, number: int, repeat: int) -> float:
    async def rounds() -> float:
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(number):
                tensor = Tensor("INPUT0", "FP32", data.shape, data)
                await dp.infer(InferenceRequest("identity", [tensor]))
            best = min(best, (time.perf_counter() - start) / number)
        return best * 1e6

    return asyncio.run(rounds())


def per_route_request(dp: DataPlane, body: bytes, number: int, repeat: int) -> float:
    handler = infer_routes(dp)[0].handler
    path = "/v2/models/identity/infer"

    async def rounds() -> float:
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(number):
                req = HttpRequest("POST", path, b"", {}, body, params={"model": "identity"})
                await handler(req)
            best = min(best, (time.perf_counter() - start) / number)
        return best * 1e6

    return asyncio.run(rounds())


def rest_route(number: int, repeat: int) -> None:
    tensor = {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [0.5, 1, 2, 3]}
    body = json.dumps({"inputs": [tensor]}).encode()
    ran = per_route_request(plane(cached=False), body, number, repeat)
    hit = per_route_request(plane(cached=True), body, number, repeat)
    tier = per_route_request(plane(cached=True, tier=True), body, number, repeat)
    print(
        f"REST route, FP32 [1,4] JSON: model ran {ran:.2f} us, cache hit {hit:.2f} us "
        f"(hit / ran = {hit / ran:.2f}), first-tier hit {tier:.2f} us (/ ran = {tier / ran:.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--number", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    for shape, number in (((1, 4), args.number), ((1, 262144), max(1, args.number // 100))):
        data = rng.random(shape, dtype=np.float32)
        ran = per_request(plane(cached=False), data, number, args.repeat)
        hit = per_request(plane(cached=True), data, number, args.repeat)
        print(
            f"FP32 {list(shape)}: model ran {ran:.2f} us, cache hit {hit:.2f} us "
            f"(hit / ran = {hit / ran:.2f})"
        )
    rest_route(args.number, args.repeat)


if __name__ == "__main__":
    main()
