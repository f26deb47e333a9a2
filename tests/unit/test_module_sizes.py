"""Small modules: no source module over 500 lines (generated protobuf modules aside)."""

from __future__ import annotations

from pathlib import Path

import rosettaserve

SRC = Path(rosettaserve.__file__).parent
LIMIT = 500


def generated(path: Path) -> bool:
    return path.stem.endswith(("_pb2", "_pb2_grpc"))


def test_no_module_is_over_500_lines() -> None:
    files = [p for p in sorted(SRC.rglob("*.py")) if not generated(p)]
    assert len(files) > 100  # the scan really looked at the package
    long = {
        str(p.relative_to(SRC)): n for p in files if (n := len(p.read_text().splitlines())) > LIMIT
    }
    assert long == {}
