"""Validate Kubernetes manifests without a cluster.

Built-in kinds are checked against the Kubernetes OpenAPI schemas (kubernetes-validate, strict:
an unknown field is an error, as with ``kubectl apply --validate=strict``); custom resources
against the ``openAPIV3Schema`` of their CustomResourceDefinition, kept in deploy/schemas/
(KServe's ClusterServingRuntime and InferenceService, the Prometheus Operator's
ServiceMonitor, the Gateway API Inference Extension's InferencePool), just as strictly. Every
object's name must be a valid Kubernetes name.

    python deploy/validate.py FILE... [--kubernetes-version 1.32.0]
    helm template deploy/helm/rosettaserve | python deploy/validate.py -

Prints one line per problem; exits 1 if there is any.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

SCHEMAS = Path(__file__).resolve().parent / "schemas"
DEFAULT_VERSION = "1.32.0"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_KINDS = {"Service"}  # kinds whose names must be DNS labels (RFC 1035)
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def crd_schemas(folder: Path = SCHEMAS) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the strict JSON schema of that custom resource."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(folder.rglob("*.yaml")):
        for crd in yaml.load_all(path.read_text(), Loader=LOADER):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                schema = version["schema"]["openAPIV3Schema"]
                found[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = strict(
                    schema
                )
    return found


def strict(schema: Any) -> Any:
    """The schema with unknown fields refused wherever it lists the known ones."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if "properties" in schema and isinstance(schema["properties"], dict):
        out["properties"] = {k: strict(v) for k, v in schema["properties"].items()}
        keep = (
            schema.get("x-kubernetes-preserve-unknown-fields") or "additionalProperties" in schema
        )
        if not keep:
            out["additionalProperties"] = False
    return out


def documents(paths: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name in paths:
        text = sys.stdin.read() if name == "-" else Path(name).read_text()
        for i, doc in enumerate(yaml.load_all(text, Loader=LOADER)):
            if doc:
                yield f"{name}#{i}", doc


def problems(doc: dict[str, Any], version: str, crds: dict[tuple[str, str], Any]) -> list[str]:
    kind, api = doc.get("kind", ""), doc.get("apiVersion", "")
    meta = doc.get("metadata") or {}
    name = str(meta.get("name", ""))
    found = []
    pattern = DNS_LABEL if kind in LABEL_KINDS else DNS_SUBDOMAIN
    if not pattern.match(name) or len(name) > (63 if kind in LABEL_KINDS else 253):
        found.append(f"metadata.name {name!r} is not a valid {kind} name")
    for key, value in {**meta.get("labels", {}), **meta.get("annotations", {})}.items():
        if not isinstance(value, str):
            found.append(f"metadata: the value of {key!r} is not a string")
    if (api, kind) in crds:
        validator = jsonschema.Draft7Validator(crds[(api, kind)])
        found += [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
                  for e in validator.iter_errors(doc)]  # fmt: skip
        return found
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        found.append(f"{path}: {exc.message}")
    except kubernetes_validate.SchemaNotFoundError:
        found.append(f"no schema for {api} {kind} (neither Kubernetes' nor a CRD's)")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="manifest files ('-': standard input)")
    parser.add_argument("--kubernetes-version", default=DEFAULT_VERSION)
    args = parser.parse_args(argv)
    crds = crd_schemas()
    failed = count = 0
    for where, doc in documents(args.files):
        count += 1
        for problem in problems(doc, args.kubernetes_version, crds):
            failed += 1
            print(f"{where} {doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}: {problem}")
    print(f"{count} resources checked, {failed} problems")
    return 1 if failed or not count else 0


if __name__ == "__main__":
    raise SystemExit(main())
