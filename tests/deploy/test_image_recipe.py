"""The container image's recipe, read without building it (deploy/build-image.sh builds and
runs it; too heavy for every test run): multi-stage, a non-root user, the ports, the entry
point KServe's storage layout needs, SIGTERM, a health check, and torch only ever pinned."""

from __future__ import annotations

import json
import re

from rosettaserve.cli.parser import build_parser
from tests.deploy.conftest import DEPLOY, ROOT

DOCKERFILE = (DEPLOY / "Dockerfile").read_text()


def instructions(name: str) -> list[str]:
    joined = re.sub(r"\\\n", " ", DOCKERFILE)
    return [line.split(None, 1)[1] for line in joined.splitlines() if line.split()[:1] == [name]]


def test_multi_stage_and_non_root() -> None:
    stages = instructions("FROM")
    assert len(stages) == 2
    assert stages[0].endswith(" AS build")
    assert instructions("COPY").count("--from=build /opt/rosettaserve /opt/rosettaserve") == 1
    (user,) = instructions("USER")
    assert user.split(":")[0] not in ("0", "root")


def test_ports_signal_health_check_and_entry_point() -> None:
    (expose,) = instructions("EXPOSE")
    assert {"8000", "8001", "8080", "8081"} <= set(expose.split())
    assert instructions("STOPSIGNAL") == ["SIGTERM"]
    (check,) = instructions("HEALTHCHECK")
    assert "healthcheck.py" in check
    assert (DEPLOY / "healthcheck.py").is_file()
    (entry,) = instructions("ENTRYPOINT")
    argv = json.loads(entry)
    assert argv[:3] == ["rosettaserve", "serve", "/mnt/models"]
    args = build_parser().parse_args([*argv[1:], "--http-port", "8080", "--grpc-port", "8081"])
    assert args.host == "0.0.0.0"


def test_torch_is_only_ever_pinned() -> None:
    for text in (DOCKERFILE, (DEPLOY / "build-image.sh").read_text()):
        for mention in re.findall(r"torch[^\s'\"]*", text):
            if mention.startswith(("torch==", "torch-")):
                assert mention.startswith(("torch==2.13.0", "torch-2.13.0")), mention
    assert "'torch==2.13.0+cpu'" in DOCKERFILE  # only the CPU build can meet this pin


def test_the_build_context_is_kept_small() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert patterns[0] == "*"  # everything out, then only what the COPY lines need
    kept = [p.removeprefix("!") for p in patterns if p.startswith("!")]
    assert set(kept) == {"pyproject.toml", "README.md", "src/", "deploy/healthcheck.py",
                         "deploy/context-extra/"}  # fmt: skip
    for path in kept:
        assert (ROOT / path).exists(), path
