"""Hosts for the multi-host tests: Linux network namespaces, each with its own address on one
bridge, and a host-name map.

Every "host" is a network namespace holding one end of a veth pair (``eth0``, an address in
10.77.0.0/24); the other ends join a bridge that lives in a namespace of its own (the switch),
so nothing is added to the machine's own network and nothing routes outside. Names resolve
through ``/etc/netns/<namespace>/hosts``, which ``ip netns exec`` puts in place of
``/etc/hosts`` for the process it starts (and a resolv.conf that points at the host's own
loopback: a name missing from the map fails at once, no query leaves). A name may have several
addresses, as a Kubernetes headless Service's does.

The test process itself reaches the hosts from a client namespace (``inside``: the calling
thread enters the namespace, and sockets made there stay in it). Needs root (CI runs as root).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.serverproc import ServerProcess, launch

CLONE_NEWNET = 0x40000000
SUBNET = "10.77.0"
NETNS_ETC = Path("/etc/netns")


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@dataclass
class Host:
    name: str  # its host name in the map
    ip: str
    ns: str  # its network namespace


class Network:
    """A switch and the hosts joined to it; ``destroy`` removes every namespace it made."""

    def __init__(self, tag: str) -> None:
        self.prefix = f"rs{os.getpid() % 100000}{tag}"
        self.switch = f"{self.prefix}-sw"
        self.hosts: dict[str, Host] = {}
        self.processes: list[ServerProcess] = []
        self.aliases: dict[str, dict[str, list[str]]] = {}  # per host: names with addresses

    def open(self) -> None:
        ip("netns", "add", self.switch)
        ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        ip("-n", self.switch, "link", "set", "br0", "up")

    def add_host(self, name: str, octet: int) -> Host:
        host = Host(name, f"{SUBNET}.{octet}", f"{self.prefix}-{octet}")
        self.hosts[name] = host  # before it exists: destroy() removes what was made of it
        ip("netns", "add", host.ns)
        port = f"p{octet}"
        ip("link", "add", "eth0", "netns", host.ns, "type", "veth", "peer", "name", port,
           "netns", self.switch)  # fmt: skip
        ip("-n", self.switch, "link", "set", port, "master", "br0")
        ip("-n", self.switch, "link", "set", port, "up")
        ip("-n", host.ns, "addr", "add", f"{host.ip}/24", "dev", "eth0")
        ip("-n", host.ns, "link", "set", "eth0", "up")
        ip("-n", host.ns, "link", "set", "lo", "up")
        for other in self.hosts.values():  # every host knows every other by name
            self.name_map(other)
        return host

    def name_map(self, host: Host, extra: dict[str, list[str]] | None = None) -> None:
        """Write ``host``'s name map: every host by name, plus ``extra`` names (each with its
        addresses, in order; None: the ones it had). Written in place: a running process sees
        the change."""
        if extra is not None:
            self.aliases[host.name] = extra
        extra = self.aliases.get(host.name, {})
        lines = ["127.0.0.1 localhost"]
        lines += [f"{h.ip} {h.name}" for h in self.hosts.values()]
        lines += [f"{address} {name}" for name, addresses in extra.items() for address in addresses]
        folder = NETNS_ETC / host.ns
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "resolv.conf").write_text("nameserver 127.0.0.1\n")
        with (folder / "hosts").open("w") as f:  # same file: the bind mount keeps seeing it
            f.write("\n".join(lines) + "\n")

    def start(self, host: Host, *args: str, port: int = 8000) -> ServerProcess:
        """``python -m rosettaserve ARGS`` on ``host``; returns once it printed its address
        (the caller waits for readiness from inside the network)."""
        cmd = ["ip", "netns", "exec", host.ns, sys.executable, "-m", "rosettaserve", *args]
        proc, lines, _ = launch(cmd, ("http",))
        server = ServerProcess(proc, f"http://{host.ip}:{port}", lines)
        self.processes.append(server)
        return server

    @contextlib.contextmanager
    def inside(self, host: Host) -> Iterator[None]:
        """Run the calling thread in ``host``'s network namespace for the ``with`` block."""
        libc = ctypes.CDLL(None, use_errno=True)
        back = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{host.ns}", os.O_RDONLY)
        try:
            if libc.setns(target, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"cannot enter {host.ns}")
            try:
                yield
            finally:
                if libc.setns(back, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "cannot return to the test's namespace")
        finally:
            os.close(target)
            os.close(back)

    def destroy(self) -> None:
        for server in self.processes:
            if server.proc.poll() is None:
                server.proc.kill()
                server.proc.wait(timeout=30)
        for host in self.hosts.values():
            subprocess.run(
                ["ip", "netns", "del", host.ns], check=False, capture_output=True, timeout=30
            )
            shutil.rmtree(NETNS_ETC / host.ns, ignore_errors=True)
        subprocess.run(
            ["ip", "netns", "del", self.switch], check=False, capture_output=True, timeout=30
        )
