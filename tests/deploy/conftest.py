"""Helpers of the deployment tests: the chart rendered with the real helm binary, and the
manifest validator of deploy/validate.py (Kubernetes' schemas, KServe's and the Prometheus
Operator's CRDs)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.conftest import load_module

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "rosettaserve"
VALUE_SETS = {"default": None, **{p.stem: p for p in sorted((CHART / "ci").glob("*.yaml"))}}


def helm() -> str:
    """The helm binary `make install-test` puts in the venv (deploy/tools/install_helm.py)."""
    found = Path(sys.executable).parent / "helm"
    return str(found) if found.exists() else shutil.which("helm") or str(found)


def run_helm(*args: str) -> str:
    done = subprocess.run([helm(), *args], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout


def render(values: Path | None, *sets: str) -> list[dict[str, Any]]:
    args = ["template", "rel", str(CHART), "--namespace", "serving"]
    args += ["-f", str(values)] if values else []
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(run_helm(*args)) if d]


@pytest.fixture(scope="session")
def validator() -> ModuleType:
    return load_module("deploy_validate", DEPLOY / "validate.py")


@pytest.fixture(scope="session")
def crds(validator: ModuleType) -> dict[tuple[str, str], Any]:
    return dict(validator.crd_schemas())


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}
