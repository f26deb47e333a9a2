"""A model repository for the log and HTTP-extras tests, and waiting for a server's log lines."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from tests.conftest import EXAMPLES
from tests.serverproc import ServerProcess

SIGNATURE = (
    "inputs: [{name: INPUT0, datatype: FP32, shape: [-1, -1]}]\n"
    "outputs: [{name: OUTPUT0, datatype: FP32, shape: [-1, -1]}]\n"
)
MODELS = {
    # name: (class, model.py)
    "identity": (
        "Identity",
        "class Identity(Model):\n"
        "    def predict(self, inputs):\n"
        "        return {'OUTPUT0': inputs['INPUT0']}\n",
    ),
    "faulty": (
        "Faulty",
        "def deep_inside(value):\n"
        "    raise RuntimeError(f'the weights are gone ({value})')\n\n\n"
        "class Faulty(Model):\n"
        "    def predict(self, inputs):\n"
        "        return {'OUTPUT0': deep_inside(42)}\n",
    ),
    "picky": (
        "Picky",
        "class Picky(Model):\n"
        "    def predict(self, inputs):\n"
        "        raise ValueError('INPUT0 must be positive')\n",
    ),
    "broken": (
        "Broken",
        "def open_weights():\n"
        "    raise OSError('weights.bin: no such device')\n\n\n"
        "class Broken(Model):\n"
        "    def load(self):\n"
        "        open_weights()\n\n"
        "    def predict(self, inputs):\n"
        "        return inputs\n",
    ),
}


def logs_repo(dest: Path) -> Path:
    """identity, faulty (predict raises RuntimeError), picky (ValueError), broken (load raises),
    and the streaming example words_stream_python."""
    for name, (cls, source) in MODELS.items():
        folder = dest / name
        folder.mkdir(parents=True)
        (folder / "model.py").write_text("from rosettaserve import Model\n\n\n" + source)
        (folder / "model.yaml").write_text(f"runtime: python\nclass: {cls}\n{SIGNATURE}")
    shutil.copytree(EXAMPLES / "words_stream_python", dest / "words_stream_python")
    return dest


def wait_for_lines(
    server: ServerProcess, match: Callable[[str], bool], count: int = 1, timeout: float = 30.0
) -> list[str]:
    """The server's lines that ``match``, once there are ``count`` of them (within ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [line for line in list(server.lines) if match(line)]
        if len(found) >= count or time.monotonic() > deadline:
            assert len(found) >= count, "\n".join(server.lines[-40:])
            return found
        time.sleep(0.02)


def lines_after(server: ServerProcess, first: str, count: int) -> list[str]:
    """The ``count`` lines that follow the first line containing ``first``."""
    lines = list(server.lines)
    start = next(i for i, line in enumerate(lines) if first in line)
    return lines[start + 1 : start + 1 + count]
