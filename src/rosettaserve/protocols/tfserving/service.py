"""TF Serving's calls over the data plane, shared by its REST and gRPC APIs: each API reads its
request into the same pieces (a target, a signature name, arrays or examples), calls here, and
writes the answer in its own form. The models, signatures, versions and errors are thus the
same on both."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.registry import ModelVersion
from rosettaserve.core.types import Tensor, TensorSpec
from rosettaserve.protocols.tfserving import convert, examples, schema, signatures
from rosettaserve.protocols.tfserving.signatures import Signature
from rosettaserve.protocols.tfserving.status import Target, servable


@dataclass(frozen=True, slots=True)
class Classified:
    mv: ModelVersion
    signature: Signature
    labels: np.ndarray  # str per (example, class)
    scores: np.ndarray | None  # float32 per (example, class), when the signature has scores


@dataclass(frozen=True, slots=True)
class Regressed:
    mv: ModelVersion
    signature: Signature
    values: np.ndarray  # float32 per example


async def predict(
    dp: DataPlane,
    mv: ModelVersion,
    signature: Signature,
    arrays: convert.Arrays,
    outputs: dict[str, TensorSpec],
    *,
    protocol: str,
) -> dict[str, Tensor]:
    """The signature's ``outputs`` (alias -> model output) for ``arrays`` (alias -> array)."""
    request = convert.inference_request(mv, signature, arrays, list(outputs.values()), protocol)
    response = await dp.infer(request)
    return convert.by_alias(outputs, response.outputs)


async def classify(
    dp: DataPlane, target: Target, request: examples.ExamplesRequest, protocol: str
) -> Classified:
    mv = servable(dp, target)
    signature = signatures.find(mv, request.signature_name, schema.CLASSIFY)
    view = signatures.classify_view(signature, mv)
    wanted = [pair[1] for pair in (view.classes, view.scores) if pair is not None]
    arrays = examples.to_inputs(request, signature.inputs)
    inference = convert.inference_request(mv, signature, arrays, wanted, protocol)
    named = {t.name: t for t in (await dp.infer(inference)).outputs}
    labels, scores = examples.classify_table(view, named, len(request.examples))
    return Classified(mv, signature, labels, scores)


async def regress(
    dp: DataPlane, target: Target, request: examples.ExamplesRequest, protocol: str
) -> Regressed:
    mv = servable(dp, target)
    signature = signatures.find(mv, request.signature_name, schema.REGRESS)
    _, spec = signatures.regress_output(signature)
    arrays = examples.to_inputs(request, signature.inputs)
    inference = convert.inference_request(mv, signature, arrays, [spec], protocol)
    named = {t.name: t for t in (await dp.infer(inference)).outputs}
    values = examples.regress_values(named[spec.name], len(request.examples))
    return Regressed(mv, signature, values)
