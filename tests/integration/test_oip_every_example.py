"""Every model in examples/models answers the Open Inference Protocol through both official
REST clients, with inputs built from its own metadata (so a new example is covered at once)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from kserve import InferenceRESTClient, InferInput, InferRequest, RESTConfig
from tritonclient.utils import InferenceServerException

from tests.conftest import EXAMPLES
from tests.serverproc import ServerProcess

MODELS = sorted(p.name for p in EXAMPLES.iterdir() if (p / "model.yaml").is_file())
NUMPY = {"FP32": np.float32, "FP64": np.float64, "INT32": np.int32, "INT64": np.int64}


def sample(spec: dict[str, Any]) -> np.ndarray:
    shape = [2 if d == -1 else d for d in spec["shape"]]
    if spec["datatype"] == "BYTES":
        return np.array(["hello"] * int(np.prod(shape)), dtype=object).reshape(shape)
    return np.arange(int(np.prod(shape)), dtype=NUMPY[spec["datatype"]]).reshape(shape)


def decoupled(client: httpclient.InferenceServerClient, model: str) -> bool:
    policy = client.get_model_config(model).get("model_transaction_policy", {})
    return bool(policy.get("decoupled"))


def test_every_example_is_covered() -> None:
    folders = [p for p in EXAMPLES.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert sorted(p.name for p in folders) == MODELS


@pytest.mark.parametrize("model", MODELS)
def test_tritonclient_binary_and_json(server: ServerProcess, model: str) -> None:
    client = httpclient.InferenceServerClient(server.http_hostport)
    meta = client.get_model_metadata(model)
    assert client.is_model_ready(model)
    for binary in (True, False):
        inputs = []
        for spec in meta["inputs"]:
            tensor = httpclient.InferInput(spec["name"], list(sample(spec).shape), spec["datatype"])
            tensor.set_data_from_numpy(sample(spec), binary_data=binary)
            inputs.append(tensor)
        outputs = [
            httpclient.InferRequestedOutput(o["name"], binary_data=binary) for o in meta["outputs"]
        ]
        if decoupled(client, model):
            with pytest.raises(InferenceServerException, match="streams its responses"):
                client.infer(model, inputs, outputs=outputs)
            continue
        result = client.infer(model, inputs, outputs=outputs)
        for spec in meta["outputs"]:
            array = result.as_numpy(spec["name"])
            assert array is not None
            assert len(array.shape) == len(spec["shape"])
            assert result.get_output(spec["name"])["datatype"] == spec["datatype"]


@pytest.mark.parametrize("model", MODELS)
def test_kserve_rest_client(server: ServerProcess, model: str) -> None:
    triton = httpclient.InferenceServerClient(server.http_hostport)
    meta = triton.get_model_metadata(model)

    async def run() -> Any:
        client = InferenceRESTClient(RESTConfig(protocol="v2"))
        try:
            inputs = []
            for spec in meta["inputs"]:
                data = sample(spec)
                tensor = InferInput(spec["name"], list(data.shape), spec["datatype"])
                tensor.set_data_from_numpy(data, binary_data=False)
                inputs.append(tensor)
            request = InferRequest(model_name=model, infer_inputs=inputs)
            return await client.infer(server.http_url, request, model_name=model)
        finally:
            await client.close()

    if decoupled(triton, model):
        with pytest.raises(httpx.HTTPStatusError, match="streams its responses"):
            asyncio.run(run())
        return
    response = asyncio.run(run())
    assert response.model_name == model
    assert sorted(o.name for o in response.outputs) == sorted(o["name"] for o in meta["outputs"])
