"""core/ is the hub: it must not know any protocol, transport or web/gRPC framework."""

from __future__ import annotations

import ast
from pathlib import Path

import rosettaserve.core

CORE = Path(rosettaserve.core.__file__).parent
FORBIDDEN = (
    "rosettaserve.protocols",
    "rosettaserve.transport",
    "rosettaserve.server",
    "starlette",
    "uvicorn",
    "grpc",
    "fastapi",
)


def imported_modules(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def test_core_imports_no_protocol_or_transport() -> None:
    files = sorted(CORE.rglob("*.py"))
    assert len(files) >= 8  # the scan really looked at core/
    offenders = [
        f"{path.name}: {name}"
        for path in files
        for name in imported_modules(path)
        if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN)
    ]
    assert offenders == []


def test_the_scan_catches_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import grpc\nfrom rosettaserve.protocols.oip import convert\n")
    assert imported_modules(sample) == ["grpc", "rosettaserve.protocols.oip"]
