"""The layer order of shared/DESIGN.md, for every package: a package imports only packages of
lower layers (never one of its own layer), there are no package cycles, and core/ knows no
protocol, transport or web/gRPC framework.

Every import counts: at the top of a module, inside a function, under ``TYPE_CHECKING``."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator
from pathlib import Path

import rosettaserve

ROOT = Path(rosettaserve.__file__).parent
CORE = ROOT / "core"
TOP = "rosettaserve"  # the package's own __init__ (Model and __version__), as a node of its own
MAIN = "__main__"

# lowest first. Packages of one layer do not import each other: each layer's packages stand
# beside each other, so any one of them can change without the others (no exception so far)
LAYERS: list[tuple[str, ...]] = [
    ("core",),
    (TOP,),  # what `import rosettaserve` gives: core's Model, the version
    ("web",),
    ("transport", "observability", "security"),
    ("protocols", "scheduling"),
    ("repository",),
    ("runtimes",),
    ("pd",),
    ("server",),
    ("cli",),
    (MAIN,),
]
LAYER = {package: level for level, packages in enumerate(LAYERS) for package in packages}

# Imports against the order, each with its reason (`file -> imported module`); none today. The
# list only shrinks: an entry that no longer occurs fails the test (take it out).
KNOWN: set[str] = set()

# transport/ takes from core its errors and their statuses, and no more than these helpers:
TRANSPORT_CORE = {
    "rosettaserve.core.errors",
    "rosettaserve.core.status",
    "rosettaserve.core.executor",  # the request-work threads (a large message inflated there)
    "rosettaserve.core.streaming",  # close_stream: an answer's stream closed (async generator)
    "rosettaserve.core.run_at_once",  # the run-at-once contract the transport drives handlers by
    "rosettaserve.core.share",  # a request's tenant and X-Priority, set at the edge for the queues
}

CORE_FORBIDDEN = (
    "rosettaserve.protocols",
    "rosettaserve.transport",
    "rosettaserve.server",
    "starlette",
    "uvicorn",
    "grpc",
    "fastapi",
)


def imported_modules(path: Path) -> list[str]:
    """Every module ``path`` imports, anywhere in it: ``from a import b`` imports ``a.b`` when
    that is a module of ours, else ``a``."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert not node.level, f"{path}: a relative import (the project has none)"
            inner = [f"{node.module}.{a.name}" for a in node.names]
            modules = [name for name in inner if is_ours(name)]
            names.extend(modules if len(modules) == len(inner) else [node.module, *modules])
    return names


def is_ours(module: str) -> bool:
    """A module or package of ours (not a name inside one)."""
    parts = module.split(".")
    if parts[0] != TOP:
        return False
    at = ROOT.joinpath(*parts[1:])
    return at.with_suffix(".py").exists() or (at / "__init__.py").exists()


def package_of(module: str) -> str | None:
    """The package of ours a dotted module name is in (None: not ours)."""
    parts = module.split(".")
    if parts[0] != TOP:
        return None
    return parts[1] if len(parts) > 1 and parts[1] in LAYER else TOP


def sources() -> Iterator[tuple[str, str, Path]]:
    """(the file relative to the package, its package, the file) for every module of ours."""
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        package = rel.parts[0] if len(rel.parts) > 1 else (MAIN if rel.stem == MAIN else TOP)
        yield rel.as_posix(), package, path


@functools.cache
def edges() -> tuple[tuple[str, str, str, str], ...]:
    """(file, its package, the module it imports, that module's package), across packages."""
    return tuple(
        (rel, package, module, target)
        for rel, package, path in sources()
        for module in imported_modules(path)
        if (target := package_of(module)) is not None and target != package
    )


def against_the_order() -> set[str]:
    return {
        f"{rel} -> {module}"
        for rel, package, module, target in edges()
        if LAYER[target] >= LAYER[package]
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def package_graph(skip: Iterable[str] = ()) -> dict[str, set[str]]:
    skipped = set(skip)
    graph: dict[str, set[str]] = {}
    for rel, package, module, target in edges():
        if f"{rel} -> {module}" not in skipped:
            graph.setdefault(package, set()).add(target)
    return graph


def test_every_package_is_placed_in_a_layer() -> None:
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert packages <= set(LAYER)
    assert len(packages) >= 10  # the scan really sees the tree


def test_packages_import_only_lower_layers() -> None:
    found = against_the_order()
    assert found - KNOWN == set()  # new: import from a lower layer, or declare a protocol there
    assert KNOWN - found == set()  # fixed: take it out of KNOWN


def test_no_package_cycles() -> None:
    assert cycles(package_graph(KNOWN)) == []


def test_transport_takes_from_core_its_errors_and_a_few_helpers() -> None:
    taken = {
        module
        for _, package, module, target in edges()
        if package == "transport" and target == "core"
    }
    assert "rosettaserve.core.errors" in taken
    assert taken <= TRANSPORT_CORE


def test_core_imports_no_protocol_or_transport() -> None:
    files = sorted(CORE.rglob("*.py"))
    assert len(files) >= 8  # the scan really looked at core/
    offenders = [
        f"{path.name}: {name}"
        for path in files
        for name in imported_modules(path)
        if any(name == bad or name.startswith(bad + ".") for bad in CORE_FORBIDDEN)
    ]
    assert offenders == []


def test_the_scan_catches_imports_anywhere(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import grpc\nfrom rosettaserve.protocols.oip import convert\n"
        "def f():\n    from rosettaserve import server\n"
        "if TYPE_CHECKING:\n    import rosettaserve.pd.wire\n"
    )
    assert sorted(imported_modules(sample)) == [
        "grpc",
        "rosettaserve.pd.wire",
        "rosettaserve.protocols.oip.convert",
        "rosettaserve.server",
    ]
    assert package_of("rosettaserve.protocols.oip") == "protocols"
    assert package_of("rosettaserve") == TOP


def test_a_cycle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
