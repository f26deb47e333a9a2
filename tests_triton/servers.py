"""Start the two servers of the suite on one repository: rosettaserve (from the main venv's
console script; ``ROSETTASERVE`` overrides its path) and Triton Inference Server 2.51 (the
``tritonserver`` binary that nvidia-pytriton 0.7.0 ships, with its Python backend)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.serverproc import ServerProcess, launch, wait_until_ready

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
REPOSITORY = HERE / "repository"
ROSETTASERVE = os.environ.get("ROSETTASERVE", str(ROOT / ".venv" / "bin" / "rosettaserve"))
SERVERS = ("rosettaserve", "triton")
# flags a feature under test needs, each server's spelling: the response cache's size, and system
# shared memory (Triton always serves it, rosettaserve with --allow-client-shm)
CACHE_BYTES = 1 << 20
ROSETTASERVE_ARGS: list[str] = ["--cache-size", str(CACHE_BYTES), "--allow-client-shm"]
TRITON_ARGS: list[str] = ["--cache-config", f"local,size={CACHE_BYTES}"]


@dataclass
class Peer:
    """A running server: which one, and where its REST and gRPC ports are (host:port)."""

    name: str
    process: ServerProcess

    @property
    def http(self) -> str:
        return self.process.http_hostport

    @property
    def grpc(self) -> str:
        return self.process.grpc_address.removeprefix("grpc://")


def copy_repository(dest: Path, source: Path = REPOSITORY) -> Path:
    """The repository, copied: both servers leave files in it (Python's bytecode)."""
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def start(name: str, repository: Path, scratch: Path) -> Peer:
    if name == "rosettaserve":
        # the models import twofold.py from this folder (Triton's from its backend folder)
        found = os.environ.get("PYTHONPATH")
        pythonpath = f"{HERE}{os.pathsep}{found}" if found else str(HERE)
        cmd = [ROSETTASERVE, "serve", str(repository), "--http-port", "0", "--grpc-port", "0"]
        cmd += ROSETTASERVE_ARGS
        proc, lines, addresses = launch(cmd, ("http", "grpc"), {"PYTHONPATH": pythonpath})
        process = ServerProcess(proc, addresses["http"], lines, addresses["grpc"])
    else:
        process = start_triton(repository, scratch)
    wait_until_ready(process)
    return Peer(name, process)


def triton_dist() -> Path:
    """Where nvidia-pytriton keeps Triton's binary, backends and Python backend stubs."""
    spec = importlib.util.find_spec("pytriton")
    assert spec is not None, "nvidia-pytriton is missing"
    assert spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / "tritonserver"


def backends(dest: Path) -> Path:
    """Triton's backend folder with the Python backend stub of this interpreter's version (the
    wheel keeps one stub per Python version apart; Triton runs backends/python/'s)."""
    dist = triton_dist()
    python = dest / "python"
    python.mkdir(parents=True)
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        (python / name).symlink_to(dist / "backends" / "python" / name)
    # the stub's Python ignores PYTHONPATH, but has this folder on its path: twofold goes here
    (python / "twofold.py").symlink_to(HERE / "twofold.py")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = dist / "python_backend_stubs" / version / "triton_python_backend_stub"
    (python / "triton_python_backend_stub").symlink_to(stub)
    return dest


def triton_env() -> dict[str, str]:
    """The Python backend stub embeds libpython: it must load this interpreter's own (a system
    libpython of another patch release fails with this standard library) and find this venv
    as its prefix, which it takes from the ``python3`` first on PATH."""
    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    lib = Path(sys.base_prefix) / "lib"
    if (lib / f"libpython{sys.version_info.major}.{sys.version_info.minor}.so.1.0").exists():
        found = os.environ.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = f"{lib}:{found}" if found else str(lib)
    return env


def free_port() -> int:
    """A port free now (tritonserver cannot be told port 0 and say which it took)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_triton(repository: Path, scratch: Path) -> ServerProcess:
    http, grpc = free_port(), free_port()
    cmd = [str(triton_dist() / "bin" / "tritonserver"), "--model-repository", str(repository)]
    cmd += ["--backend-directory", str(backends(scratch / "backends"))]
    cmd += ["--http-address", "127.0.0.1", "--http-port", str(http)]
    cmd += ["--grpc-address", "127.0.0.1", "--grpc-port", str(grpc)]
    cmd += ["--cache-directory", str(triton_dist() / "caches")]  # (its local response cache)
    cmd += ["--allow-metrics", "false", "--log-verbose", "0", *TRITON_ARGS]
    proc, lines, _ = launch(cmd, (), triton_env())
    return ServerProcess(proc, f"http://127.0.0.1:{http}", lines, f"127.0.0.1:{grpc}")


# the system libraries tritonserver and the Python backend stub link (the wheel bundles the rest)
DEBIAN_PACKAGES = {"libz.so": "zlib1g", "libstdc++.so": "libstdc++6", "libgcc_s.so": "libgcc-s1"}


def missing_packages() -> list[str]:
    """The Debian packages of the libraries tritonserver or the stub cannot find (``ldd``)."""
    dist = triton_dist()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    binaries = [dist / "bin" / "tritonserver", dist / "backends" / "python" / "libtriton_python.so"]
    binaries.append(dist / "python_backend_stubs" / version / "triton_python_backend_stub")
    env = dict(os.environ, **triton_env())
    ldd = subprocess.run(
        ["ldd", *map(str, binaries)], env=env, capture_output=True, text=True, check=False
    )
    missing = {line.split()[0] for line in ldd.stdout.splitlines() if "not found" in line}
    packages = {f"libpython{version}" for lib in missing if lib.startswith("libpython")}
    packages |= {
        deb for lib in missing for prefix, deb in DEBIAN_PACKAGES.items() if lib.startswith(prefix)
    }
    unknown = [lib for lib in missing if not lib.startswith(("libpython", *DEBIAN_PACKAGES))]
    assert not unknown, f"no Debian package known for {unknown}"
    return sorted(packages)


if __name__ == "__main__":  # the Makefile: which Debian packages to install for tritonserver
    print(" ".join(missing_packages()))
