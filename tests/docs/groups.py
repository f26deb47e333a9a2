"""The servers the documentation's blocks run against, one set per group, started as the docs
say: a ``server=GROUP`` block's command lines (else ``rosettaserve serve examples/models``, what
``make serve`` runs), with the examples copied, free ports, and file arguments in GROUP's folder.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import ssl
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import EXAMPLES, assemble_repo
from tests.docs.blocks import Block
from tests.pdfakes import free_port
from tests.serverproc import ServerProcess, launch, stop_cleanly, wait_until_ready

DEFAULT_COMMAND = "rosettaserve serve examples/models\n"
BLOCK_TIMEOUT_S = 180.0
HOSTPORT = re.compile(r"\b(127\.0\.0\.1|localhost):(\d{2,5})\b")
PORT_FLAGS = {"--http-port": 8000, "--grpc-port": 8001, "--metrics-port": None}
# A curl that fails on an HTTP error status, so a block whose request is refused fails; unless
# the block prints the status itself (-w), as one showing a refusal does.
SH_PRELUDE = """curl() {
  case " $* " in
    *" -w "*|*" --write-out "*) command curl --max-time 120 "$@" ;;
    *) command curl --fail-with-body --max-time 120 "$@" ;;
  esac
}
"""


@dataclass
class Group:
    name: str
    folder: Path
    ports: dict[int, int] = field(default_factory=dict)  # port the docs say -> port in use
    procs: list[ServerProcess] = field(default_factory=list)

    def rewrite(self, text: str) -> str:
        def swap(m: re.Match[str]) -> str:
            port = self.ports.get(int(m.group(2)))
            return m.group(0) if port is None else f"{m.group(1)}:{port}"

        return HOSTPORT.sub(swap, text)

    def env(self) -> dict[str, str]:
        bin_dir = str(Path(sys.executable).parent)
        return dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))

    def run(self, block: Block) -> subprocess.CompletedProcess[str]:
        text = self.rewrite(block.text)
        if block.lang == "python":
            script = self.folder / f"block_{block.line}.py"
            script.write_text(text)
            cmd = [sys.executable, str(script)]
        else:
            cmd = ["bash", "-e", "-o", "pipefail", "-c", SH_PRELUDE + text]
        return subprocess.run(
            cmd,
            check=False,
            cwd=self.folder,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
        )

    def start(self, command_block: str) -> None:
        lines = command_lines(command_block)
        self.reserve_peer_ports(lines)
        for line in lines:
            words = shlex.split(line)
            if words[:2] == ["rosettaserve", "serve"]:
                self.procs.append(self.start_serve(words[2:]))
            elif words[:2] == ["rosettaserve", "scheduler"]:
                self.procs.append(self.start_scheduler(words[2:]))

    def reserve_peer_ports(self, lines: list[str]) -> None:
        """A port a ``--peer-allow`` names belongs to a server that may start after the one
        told of it: such ports are picked now (free ones), the others stay 0 (any free)."""
        for line in lines:
            words = shlex.split(line)
            for before, word in itertools.pairwise(words):
                if before == "--peer-allow" and (m := HOSTPORT.fullmatch(word)):
                    self.ports.setdefault(int(m.group(2)), free_port())

    def start_serve(self, args: list[str]) -> ServerProcess:
        """``examples/models`` is a copy of the examples; another REPO, a folder that the
        group's setup blocks made."""
        repo = self.folder / args[0]
        if args[0].rstrip("/") == "examples/models":
            repo = self.folder / "examples_copy"
            if not repo.exists():
                assemble_repo(repo, EXAMPLES)
        flags = ("--http-port", "--grpc-port", "--metrics-port")
        rest, wanted = self.take_ports([self.rewrite(a) for a in args[1:]], flags)
        cmd = [sys.executable, "-m", "rosettaserve", "serve", str(repo), *rest]
        kinds = ["http", "grpc"] + (["metrics"] if "--metrics-port" in wanted else [])
        proc, lines, addresses = launch(cmd, tuple(kinds))
        server = ServerProcess(proc, addresses["http"], lines, addresses["grpc"])
        self.learn(wanted, addresses)
        wait_until_ready(server, self.context(rest))
        return server

    def start_scheduler(self, args: list[str]) -> ServerProcess:
        rest, wanted = self.take_ports([self.rewrite(a) for a in args], ("--http-port",))
        cmd = [sys.executable, "-m", "rosettaserve", "scheduler", *rest]
        proc, lines, addresses = launch(cmd, ("http",))
        server = ServerProcess(proc, addresses["http"], lines)
        self.learn(wanted, addresses)
        wait_until_ready(server, self.context(rest))
        return server

    def take_ports(
        self, args: list[str], flags: tuple[str, ...]
    ) -> tuple[list[str], dict[str, int]]:
        """``args`` with each port flag set to 0 (or to the port reserved for it), files made
        absolute; the ports they named."""
        wanted = {f: d for f, d in PORT_FLAGS.items() if f in flags and d is not None}
        rest: list[str] = []
        it = iter(args)
        for arg in it:
            if arg in flags:
                wanted[arg] = int(next(it))
                rest += [arg, str(self.ports.get(wanted[arg], 0))]
            elif (self.folder / arg).is_file():
                rest.append(str(self.folder / arg))
            else:
                rest.append(arg)
        for flag in wanted:
            if flag not in rest:
                rest += [flag, "0"]
        return rest, wanted

    def learn(self, wanted: dict[str, int], addresses: dict[str, str]) -> None:
        kinds = {"--http-port": "http", "--grpc-port": "grpc", "--metrics-port": "metrics"}
        for flag, port in wanted.items():
            address = addresses[kinds[flag]].split()[0]
            self.ports[port] = int(address.rstrip("/").rsplit(":", 1)[1].split("/")[0])

    @staticmethod
    def context(args: list[str]) -> ssl.SSLContext | None:
        if "--tls-cert" not in args:
            return None
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop_cleanly(proc)


def command_lines(text: str) -> list[str]:
    """The block's command lines, continuations joined, a trailing ``&`` dropped."""
    joined = text.replace("\\\n", " ")
    return [line.strip().removesuffix("&").strip() for line in joined.splitlines() if line.strip()]
