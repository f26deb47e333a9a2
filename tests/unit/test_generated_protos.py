"""The checked-in protobuf modules are exactly what the .proto files generate."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "generate_protos.py"


def test_generated_code_matches_the_proto_files() -> None:
    command = [sys.executable, str(SCRIPT), "--check"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_check_notices_a_stale_file(tmp_path: Path) -> None:
    generated = Path(__file__).resolve().parents[2] / "src/rosettaserve/protocols/oip/pb"
    target = generated / "model_config_pb2.py"
    original = target.read_bytes()
    try:
        target.write_bytes(original + b"\n# edited by hand\n")
        done = subprocess.run(
            [sys.executable, str(SCRIPT), "--check"], capture_output=True, check=False
        )
        assert done.returncode == 1
        assert b"model_config_pb2.py" in done.stdout
    finally:
        target.write_bytes(original)
