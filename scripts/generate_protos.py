"""Regenerate the checked-in protobuf modules from the .proto files beside them.

    python scripts/generate_protos.py            # rewrite the generated files
    python scripts/generate_protos.py --check    # exit 1 if they are not what the .proto files give

Uses grpcio-tools (pinned in the dev/test extras, so the output is stable). Only message code is
generated: the gRPC services are registered by hand under their standard names (see
transport/grpc.py).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PROTO_DIRS = [
    "rosettaserve/protocols/oip/pb",
    "rosettaserve/protocols/grps/pb",
    "rosettaserve/protocols/health/pb",
]


def generate(out: Path) -> list[Path]:
    from grpc_tools import protoc

    protos = sorted(str(p.relative_to(SRC)) for d in PROTO_DIRS for p in (SRC / d).glob("*.proto"))
    include = str(Path(protoc.__file__).parent / "_proto")
    args = ["protoc", f"-I{SRC}", f"-I{include}", f"--python_out={out}", f"--pyi_out={out}"]
    if protoc.main([*args, *protos]) != 0:
        raise SystemExit("protoc failed")
    return sorted(p.relative_to(out) for p in out.rglob("*_pb2.py*"))


def _same(checked_in: Path, generated: Path) -> bool:
    return checked_in.is_file() and checked_in.read_bytes() == generated.read_bytes()


def main(argv: list[str]) -> int:
    if "--check" not in argv:
        generate(SRC)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        stale = [str(rel) for rel in generate(fresh) if not _same(SRC / rel, fresh / rel)]
    if stale:
        print("generated protobuf code is stale; run scripts/generate_protos.py:", *stale)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
