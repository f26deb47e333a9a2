"""The Helm chart, without a cluster: it lints, renders with every value set of its ci/ folder,
every resource it renders is valid against Kubernetes' schemas (and the Prometheus Operator's
ServiceMonitor CRD), and what the pods run is a command line rosettaserve accepts."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rosettaserve.cli.parser import build_parser
from tests.deploy.conftest import CHART, VALUE_SETS, by_kind, render, run_helm

ENV = {"$(POD_IP)": "10.1.2.3", "$(ROSETTASERVE_API_KEY)": "key"}  # what Kubernetes substitutes


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_the_chart_lints_strictly(values: Path | None) -> None:
    out = run_helm("lint", "--strict", str(CHART), *(["-f", str(values)] if values else []))
    assert "0 chart(s) failed" in out


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_every_rendered_resource_is_valid(
    values: Path | None, validator: ModuleType, crds: dict[tuple[str, str], Any]
) -> None:
    docs = render(values)
    assert docs
    for doc in docs:
        assert validator.problems(doc, validator.DEFAULT_VERSION, crds) == [], doc["kind"]
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "rosettaserve"
        assert labels["app.kubernetes.io/instance"] == "rel"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/component"]


def container_args(deployment: dict[str, Any]) -> list[str]:
    """The container's command line as rosettaserve's parser sees it."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = [ENV.get(a, a) for a in container["args"]]
    if container.get("command"):
        return [*container["command"][1:], *args]
    return ["serve", "/mnt/models", "--host", "0.0.0.0", *args]  # the image's entry point


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_every_pod_runs_a_command_line_rosettaserve_accepts(values: Path | None) -> None:
    for deployment in by_kind(render(values), "Deployment").values():
        args = build_parser().parse_args(container_args(deployment))
        if args.command == "serve":
            assert args.http_port == 8000
            assert args.grpc_port == 8001
            assert str(args.repository) == "/mnt/models"


def test_services_select_their_pods_with_both_ports() -> None:
    docs = render(VALUE_SETS["secure-values"])
    pods = {name: d["spec"]["template"]["metadata"]["labels"]
            for name, d in by_kind(docs, "Deployment").items()}  # fmt: skip
    for name, service in by_kind(docs, "Service").items():
        selector = service["spec"]["selector"]
        chosen = [p for p, labels in pods.items() if selector.items() <= labels.items()]
        assert len(chosen) == 1, (name, chosen)  # exactly one Deployment behind each Service
        ports = {p["name"]: p for p in service["spec"]["ports"]}
        assert ports["http"]["appProtocol"] == "https"  # TLS is on in this value set
        if not name.endswith("-scheduler"):
            assert ports["grpc"]["appProtocol"] == "grpc"
    server = by_kind(docs, "Service")["rel-rosettaserve"]
    assert {p["port"] for p in server["spec"]["ports"]} == {8000, 8001}
    for pdb in by_kind(docs, "PodDisruptionBudget").values():
        selector = pdb["spec"]["selector"]["matchLabels"]
        assert any(selector.items() <= labels.items() for labels in pods.values())


def test_the_server_pod() -> None:
    (deployment,) = by_kind(render(None), "Deployment").values()
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert container["startupProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert container["resources"]["requests"]["cpu"]
    assert {p["containerPort"] for p in container["ports"]} == {8000, 8001}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/mnt/models"]["readOnly"] is True
    assert container["image"].endswith(":0.1.0-slim")
    assert deployment["spec"]["replicas"] == 2
    assert "HorizontalPodAutoscaler" not in {d["kind"] for d in render(None)}


def test_tls_and_api_keys_come_from_secrets() -> None:
    docs = render(VALUE_SETS["secure-values"])
    server = by_kind(docs, "Deployment")["rel-rosettaserve"]
    spec = server["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = build_parser().parse_args(container_args(server))
    assert (str(args.tls_cert), str(args.tls_key)) == (
        "/etc/rosettaserve/tls/tls.crt",
        "/etc/rosettaserve/tls/tls.key",
    )
    assert str(args.tls_client_ca) == "/etc/rosettaserve/tls/ca.crt"
    assert [str(f) for f in args.api_key_file] == ["/etc/rosettaserve/api-keys/api-keys.txt"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "rosettaserve-tls"
    assert volumes["api-keys"]["secret"]["secretName"] == "rosettaserve-api-keys"
    mounted = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounted["tls"] == "/etc/rosettaserve/tls"
    assert mounted["api-keys"] == "/etc/rosettaserve/api-keys"
    env = {e["name"]: e for e in container["env"]}
    ref = env["ROSETTASERVE_API_KEY"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "rosettaserve-api-key", "key": "api-key"}
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    (hpa,) = by_kind(docs, "HorizontalPodAutoscaler").values()
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == "rosettaserve_inflight_requests"
    assert hpa["spec"]["scaleTargetRef"]["name"] == "rel-rosettaserve"
    assert "replicas" not in server["spec"]  # the autoscaler owns it
    (monitor,) = by_kind(docs, "ServiceMonitor").values()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["scheme"]) == ("http", "/metrics", "https")
    assert endpoint["authorization"]["credentials"]["name"] == "rosettaserve-api-key"


def test_the_pd_topology_finds_its_instances_through_headless_services() -> None:
    docs = render(VALUE_SETS["pd-values"])
    deployments = by_kind(docs, "Deployment")
    assert set(deployments) == {
        "rel-rosettaserve-scheduler",
        "rel-rosettaserve-prefill",
        "rel-rosettaserve-decode",
    }
    services = by_kind(docs, "Service")
    for role in ("prefill", "decode"):
        headless = services[f"rel-rosettaserve-{role}-headless"]
        assert headless["spec"]["clusterIP"] == "None"
        assert headless["spec"]["publishNotReadyAddresses"] is False
        args = build_parser().parse_args(container_args(deployments[f"rel-rosettaserve-{role}"]))
        assert args.role == role
        assert args.advertise_host == ENV["$(POD_IP)"]  # the pod's own address
        other = "decode" if role == "prefill" else "prefill"  # the only peers it contacts
        assert args.peer_allow == [f"http://rel-rosettaserve-{other}-headless:8000"]
    scheduler = build_parser().parse_args(container_args(deployments["rel-rosettaserve-scheduler"]))
    assert scheduler.command == "scheduler"
    assert scheduler.prefill == ["http://rel-rosettaserve-prefill-headless:8000"]
    assert scheduler.decode == ["http://rel-rosettaserve-decode-headless:8000"]
    assert scheduler.discovery_interval == 5.0
    assert scheduler.host == "0.0.0.0"
    assert deployments["rel-rosettaserve-decode"]["spec"]["replicas"] == 2
    for d in deployments.values():
        assert d["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":0.1.0-llm")


def test_pd_peers_get_the_ca_the_client_certificate_and_the_key() -> None:
    deployments = by_kind(render(VALUE_SETS["secure-values"]), "Deployment")
    scheduler = build_parser().parse_args(container_args(deployments["rel-rosettaserve-scheduler"]))
    assert scheduler.prefill == ["https://rel-rosettaserve-prefill-headless:8000"]
    assert str(scheduler.peer_ca) == "/etc/rosettaserve/tls/ca.crt"
    assert str(scheduler.peer_cert) == "/etc/rosettaserve/tls/tls.crt"
    assert scheduler.peer_api_key == ENV["$(ROSETTASERVE_API_KEY)"]
    decode = build_parser().parse_args(container_args(deployments["rel-rosettaserve-decode"]))
    assert str(decode.peer_ca) == "/etc/rosettaserve/tls/ca.crt"
    assert decode.peer_allow == ["https://rel-rosettaserve-prefill-headless:8000"]


def test_the_validator_refuses_what_kubernetes_would(
    validator: ModuleType, crds: dict[tuple[str, str], Any]
) -> None:
    docs = render(VALUE_SETS["secure-values"])
    service = next(d for d in docs if d["kind"] == "Service")
    service["spec"]["ports"][0]["appProtocl"] = "http"  # a misspelt field
    service["metadata"]["name"] = "Not_A_Name"
    found = validator.problems(service, validator.DEFAULT_VERSION, crds)
    assert any("appProtocl" in p for p in found)
    assert any("not a valid Service name" in p for p in found)
    (monitor,) = by_kind(docs, "ServiceMonitor").values()
    monitor["spec"]["endpoints"][0]["interval"] = 15  # a number where a duration string goes
    assert validator.problems(monitor, validator.DEFAULT_VERSION, crds)
    unknown = {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "x"}}
    assert validator.problems(unknown, validator.DEFAULT_VERSION, crds)


def test_the_inference_pool_holds_the_server_pods_behind_the_endpoint_picker(
    validator: ModuleType, crds: dict[tuple[str, str], Any]
) -> None:
    assert not by_kind(render(None), "InferencePool")  # off by default
    docs = render(VALUE_SETS["gateway-values"])
    (pool,) = by_kind(docs, "InferencePool").values()
    pods = {name: d["spec"]["template"]["metadata"]["labels"]
            for name, d in by_kind(docs, "Deployment").items()}  # fmt: skip
    selector = pool["spec"]["selector"]["matchLabels"]
    assert [p for p, labels in pods.items() if selector.items() <= labels.items()] == [
        "rel-rosettaserve"
    ]
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    picker = pool["spec"]["endpointPickerRef"]
    assert (picker["name"], picker["port"], picker["failureMode"]) == (
        "llm-d-epp", {"number": 9002}, "FailClose"
    )  # fmt: skip
    picker["failureMode"] = "FailSometimes"  # the CRD's enum refuses it
    del pool["spec"]["targetPorts"]  # and a required field
    found = validator.problems(pool, validator.DEFAULT_VERSION, crds)
    assert any("FailSometimes" in p for p in found)
    assert any("targetPorts" in p for p in found)
