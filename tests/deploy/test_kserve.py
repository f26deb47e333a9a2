"""The KServe manifests, without a cluster: valid against KServe's own CRD schemas
(deploy/schemas/kserve), a runtime declaring the formats, protocols, ports and probes KServe
expects, and example InferenceServices that select it."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
import yaml

from rosettaserve.cli.parser import build_parser
from tests.deploy.conftest import DEPLOY

MANIFESTS = sorted((DEPLOY / "kserve").glob("*.yaml"))


def load(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((DEPLOY / "kserve" / name).read_text())
    assert isinstance(doc, dict)
    return doc


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_every_manifest_is_valid_against_kserve_crds(
    path: Any, validator: ModuleType, crds: dict[tuple[str, str], Any]
) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs
    for doc in docs:
        assert (doc["apiVersion"], doc["kind"]) in crds  # checked by KServe's schema, not skipped
        assert validator.problems(doc, validator.DEFAULT_VERSION, crds) == []


def test_the_cluster_serving_runtime() -> None:
    runtime = load("clusterservingruntime.yaml")
    spec = runtime["spec"]
    assert {f["name"] for f in spec["supportedModelFormats"]} == {
        "onnx",
        "sklearn",
        "python",
        "llm",
    }
    assert spec["protocolVersions"] == ["v2", "grpc-v2"]
    (container,) = spec["containers"]
    assert container["name"] == "kserve-container"
    args = build_parser().parse_args(
        ["serve", "/mnt/models", "--host", "0.0.0.0", *container["args"]]
    )
    assert (args.http_port, args.grpc_port) == (8080, 8081)
    assert {p["containerPort"] for p in container["ports"]} == {8080, 8081}
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": 8080}
    assert container["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": 8080}
    assert container["securityContext"]["runAsNonRoot"] is True


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("inferenceservice-onnx.yaml", "onnx"),
        ("inferenceservice-llm.yaml", "llm"),
        ("inferenceservice-grpc.yaml", "onnx"),
    ],
)
def test_the_example_inference_services_select_the_runtime(name: str, fmt: str) -> None:
    model = load(name)["spec"]["predictor"]["model"]
    assert model["runtime"] == load("clusterservingruntime.yaml")["metadata"]["name"]
    assert model["modelFormat"]["name"] == fmt
    assert model["protocolVersion"] in ("v2", "grpc-v2")
    assert model["storageUri"]
