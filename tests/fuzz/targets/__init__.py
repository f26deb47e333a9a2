"""The fuzz targets: one module per parser of untrusted bytes, each with ``check(data)``, which
raises (AssertionError, or whatever escapes the parser) when a property does not hold.

``tests/fuzz/run.py`` runs them under atheris; ``tests/fuzz/test_fuzz.py`` replays the checked-in
corpus and regressions through ``check`` and runs each target for a bounded time."""

from __future__ import annotations

import importlib
from collections.abc import Callable

TARGETS = (
    "h1_connection",
    "h2_frames",
    "hpack_decoder",
    "grpc_wire",
    "json_numbers",
    "tfserving_json",
    "tfserving_tensorproto",
    "tfserving_predict",
    "grps_json",
    "oip_rest",
    "llm_sampling",
    "openai_request",
    "llm_api_request",
    "pd_scheduler",
    "pd_handover",
    "content_coding",
    "torchserve_request",
)


def load(name: str) -> Callable[[bytes], None]:
    if name not in TARGETS:
        raise SystemExit(f"unknown fuzz target {name!r}; one of {', '.join(TARGETS)}")
    module = importlib.import_module(f"tests.fuzz.targets.{name}")
    check: Callable[[bytes], None] = module.check
    return check
