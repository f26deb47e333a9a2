"""The C JSON number reader (``core/json_numbers.c``) built with AddressSanitizer and libFuzzer's
coverage, for its fuzz target: an extension module of its own, outside the source tree.

Run under atheris with ``asan_with_fuzzer.so`` (atheris's AddressSanitizer and libFuzzer
runtime) preloaded, the module's every out-of-bounds read or write, use after free or overflow
of its output buffer stops the run with a report, where the ordinary build would read past the
request's bytes silently; and libFuzzer sees the C code's branches as well as Python's.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src" / "rosettaserve" / "core" / "json_numbers.c"
HEADERS = sorted(SOURCE.parent.glob("*.h"))  # its #includes are among them
BUILD = ROOT / "build" / "fuzz"
FLAGS = ["-g", "-O1", "-fno-omit-frame-pointer", "-fsanitize=address,fuzzer-no-link"]
ENV_MODULE = "ROSETTASERVE_FUZZ_JSON_NUMBERS"  # the built module the target loads


def runtime() -> Path:
    """atheris's AddressSanitizer + libFuzzer runtime, to preload."""
    import atheris

    return Path(atheris.path()) / "asan_with_fuzzer.so"


def build(sanitized: bool = True) -> Path:
    """The instrumented module (built again when the source is newer); ``sanitized=False``: an
    ordinary build of the same source, for tests in a process without the sanitizer."""
    folder = BUILD if sanitized else BUILD / "plain"
    target = folder / ("json_numbers" + str(sysconfig.get_config_var("EXT_SUFFIX")))
    newest = max(path.stat().st_mtime for path in [SOURCE, *HEADERS])
    if target.exists() and target.stat().st_mtime >= newest:
        return target
    clang = shutil.which("clang")
    if clang is None:
        raise SystemExit("clang is needed for the json_numbers fuzz target (make fuzz installs it)")
    folder.mkdir(parents=True, exist_ok=True)
    include = sysconfig.get_paths()["include"]
    tmp = target.with_suffix(".tmp")
    flags = FLAGS if sanitized else ["-O2"]
    subprocess.run(
        [clang, "-shared", "-fPIC", *flags, f"-I{include}", str(SOURCE), "-o", str(tmp)],
        check=True,
    )
    tmp.replace(target)
    return target


def environment() -> dict[str, str]:
    """The environment a run of the json_numbers target needs (building the module first)."""
    env = dict(os.environ)
    env[ENV_MODULE] = str(build())
    env["LD_PRELOAD"] = str(runtime())
    # the interpreter's own allocations are never freed at exit: not this module's leaks
    env["ASAN_OPTIONS"] = "detect_leaks=0:allocator_may_return_null=1"
    return env


def load() -> ModuleType:
    """The module the environment names (under AddressSanitizer), else an ordinary build."""
    path = os.environ.get(ENV_MODULE) or str(build(sanitized=False))
    spec = importlib.util.spec_from_file_location("json_numbers", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
