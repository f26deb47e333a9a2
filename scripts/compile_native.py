"""Compile the request path with mypyc, in place: an extension module next to each source; and
build the C modules of the request path (C_MODULES) the same way.

    python scripts/compile_native.py            # build, unless every module is up to date
    python scripts/compile_native.py --clean    # remove the built modules (pure Python again)

``make serve`` and ``make test`` run it. The modules below carry every inference request (HTTP/1.1,
routing, OIP REST and gRPC conversion, the data plane, the batcher, statistics and metrics);
compiled, a small OIP REST request costs about a third fewer instructions (bench/RESULTS.md).
An extension module is imported in preference to the ``.py`` beside it, so a source edited after
the build would not take effect: the build is redone whenever a source (or this script, or the
mypy settings in pyproject.toml) is newer than the oldest built module, and
``tests/unit/test_native_build.py`` fails on a stale one.

What the compiled modules are written around:
- mypyc cannot compile async generators: they live in ``core/streaming.py``, not on the list;
- it keeps the ``__init__`` that ``@dataclass`` generates interpreted, so the classes built for
  every request (``Call``, ``Tensor``, ``InferenceRequest``, ``HttpRequest``...) are declared
  ``@dataclass(init=False)`` with an ``__init__`` of their own.
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
BUILD = ROOT / "build" / "native"
GROUP = "rosettaserve_native"  # the shared library: src/rosettaserve_native__mypyc*.so

MODULES = [
    "rosettaserve/core/call.py",
    "rosettaserve/core/codec.py",
    "rosettaserve/core/dataplane.py",
    "rosettaserve/core/dtypes.py",
    "rosettaserve/core/invoker.py",
    "rosettaserve/core/json_bulk.py",
    "rosettaserve/core/outputs.py",
    "rosettaserve/core/protowire.py",
    "rosettaserve/core/queue_limit.py",
    "rosettaserve/core/registry.py",
    "rosettaserve/core/share.py",
    "rosettaserve/core/stats.py",
    "rosettaserve/core/types.py",
    "rosettaserve/observability/metrics.py",
    "rosettaserve/protocols/oip/answer_tier.py",
    "rosettaserve/protocols/oip/convert.py",
    "rosettaserve/protocols/oip/grpc_convert.py",
    "rosettaserve/protocols/oip/grpc_infer.py",
    "rosettaserve/protocols/oip/grpc_wire.py",
    "rosettaserve/protocols/oip/rest.py",
    "rosettaserve/protocols/tfserving/convert.py",
    "rosettaserve/protocols/tfserving/grpc.py",
    "rosettaserve/protocols/tfserving/grpc_convert.py",
    "rosettaserve/protocols/tfserving/predict_wire.py",
    "rosettaserve/protocols/tfserving/service.py",
    "rosettaserve/protocols/tfserving/signatures.py",
    "rosettaserve/protocols/tfserving/status.py",
    "rosettaserve/protocols/tfserving/tensorproto.py",
    "rosettaserve/scheduling/batcher.py",
    "rosettaserve/scheduling/fair_share.py",
    "rosettaserve/transport/coalesce.py",
    "rosettaserve/transport/eager.py",
    "rosettaserve/transport/grpc.py",
    "rosettaserve/transport/grpc_call.py",
    "rosettaserve/transport/grpc_context.py",
    "rosettaserve/transport/h1.py",
    "rosettaserve/transport/h1_answers.py",
    "rosettaserve/transport/h1_framing.py",
    "rosettaserve/transport/h1_head.py",
    "rosettaserve/transport/h2.py",
    "rosettaserve/transport/h2_fields.py",
    "rosettaserve/transport/h2_machine.py",
    "rosettaserve/transport/h2_sender.py",
    "rosettaserve/transport/h2_server.py",
    "rosettaserve/transport/h2_stream.py",
    "rosettaserve/transport/h2_wire.py",
    "rosettaserve/transport/hpack.py",
    "rosettaserve/transport/idle.py",
    "rosettaserve/web/app.py",
    "rosettaserve/web/grpc_services.py",
    "rosettaserve/web/routing.py",
]

# Hand-written C, where mypyc's code is still far from what the task costs in C: each is optional
# (its users fall back to a pure-Python way when it is not built).
C_MODULES = [
    "rosettaserve/core/json_numbers.c",  # flat JSON number arrays (core/json_bulk.py)
    "rosettaserve/core/json_floats.c",  # float32 arrays written as JSON (core/json_nonfinite.py)
    "rosettaserve/transport/body_buffer.c",  # a large request body's buffer, not zeroed (h1.py)
]


def sources_of(source: str) -> list[Path]:
    """The files a listed module is built from: its source and, for C, the headers of its own
    it includes (``#include "name.h"``, beside it), theirs too."""
    files = [SRC / source]
    for path in files:  # grows as headers are found
        if path.suffix in (".c", ".h"):
            for name in re.findall(r'^#include "([^"]+)"', path.read_text(), re.MULTILINE):
                header = path.parent / name
                if header not in files:
                    files.append(header)
    return files


def module_name(source: str) -> str:
    """The dotted name of the module built from ``source`` (relative to src/, .py or .c)."""
    return source.removesuffix(".py").removesuffix(".c").replace("/", ".")


def extension_of(source: str) -> Path:
    """Where the compiled module of ``source`` (relative to src/) is written."""
    return SRC / (module_name(source).replace(".", "/") + sysconfig.get_config_var("EXT_SUFFIX"))


def built() -> list[Path]:
    """Every extension module under src/: the listed ones and the shared library."""
    return sorted([*SRC.glob(f"{GROUP}__mypyc*.so"), *(SRC / "rosettaserve").rglob("*.so")])


def up_to_date() -> bool:
    expected = [extension_of(m) for m in MODULES + C_MODULES]
    present = built()
    if not all(p.exists() for p in expected) or len(present) != len(expected) + 1:
        return False
    inputs = [p for m in MODULES + C_MODULES for p in sources_of(m)]
    inputs += [Path(__file__), ROOT / "pyproject.toml"]
    return min(p.stat().st_mtime for p in present) >= max(p.stat().st_mtime for p in inputs)


def clean() -> None:
    for path in built():
        path.unlink()


def build() -> None:
    from mypyc.build import mypycify
    from setuptools import Extension, setup

    clean()  # a module taken off the list must not leave its old build behind
    os.chdir(ROOT)  # mypy reads its settings from pyproject.toml here
    setup(
        name=GROUP,
        package_dir={"": "src"},
        ext_modules=[
            *mypycify([f"src/{m}" for m in MODULES], group_name=GROUP, target_dir=str(BUILD / "c")),
            *[Extension(module_name(m), [f"src/{m}"]) for m in C_MODULES],
        ],
        script_args=["--quiet", "build_ext", "--inplace", "--build-temp", str(BUILD / "temp")],
    )
    for path in built():  # an unchanged module is copied with its old time: mark this build's
        os.utime(path)


def main() -> int:
    if "--clean" in sys.argv[1:]:
        clean()
        return 0
    if up_to_date():
        print("compile_native: the compiled modules are up to date")
        return 0
    print(f"compile_native: compiling {len(MODULES)} modules with mypyc (about a minute)")
    build()
    if not up_to_date():
        print("compile_native: the build did not produce every module", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
