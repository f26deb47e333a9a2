"""security.keys: where keys come from, what a request must carry, what stays open."""

from __future__ import annotations

from pathlib import Path

import pytest

from rosettaserve.core.share import DEFAULT
from rosettaserve.core.status import ErrorKind
from rosettaserve.security.keys import (
    OPEN_GRPC,
    OPEN_HTTP,
    Guard,
    KeySourceError,
    gather_keys,
    key_weights,
    presented,
    read_weighted_keys,
)


def test_keys_from_flags_files_and_the_environment_are_valid_together(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# comment\n\n  file-one  \nfile-two\n")
    found = gather_keys(["flag"], [keys], {"ROSETTASERVE_API_KEY": "env"})
    assert found == ("flag", "file-one", "file-two", "env")
    assert gather_keys([], [], {}) == ()


@pytest.mark.parametrize("bad", ["", "has space", "tab\tkey", "é-key"])
def test_a_key_is_printable_ascii_without_spaces(bad: str) -> None:
    with pytest.raises(KeySourceError) as caught:
        gather_keys([bad], [], {})
    assert bad not in str(caught.value) or not bad


@pytest.mark.parametrize(
    ("authorization", "api_key", "key"),
    [
        ("Bearer abc", None, "abc"),
        ("bearer abc", None, "abc"),
        ("BEARER  abc ", None, "abc"),
        ("Basic abc", None, None),
        ("Basic abc", "xyz", "xyz"),
        (None, "xyz", "xyz"),
        (None, None, None),
        ("Bearer abc", "xyz", "abc"),
    ],
)
def test_the_key_a_request_presents(
    authorization: str | None, api_key: str | None, key: str | None
) -> None:
    assert presented(authorization, api_key) == key


def test_the_guard_admits_any_configured_key_and_nothing_else() -> None:
    guard = Guard(["one", "two"])
    assert guard.valid("one")
    assert guard.valid("two")
    for wrong in ("", "on", "one ", "onetwo", "ONE", "\udcff", "é"):
        assert not guard.valid(wrong)
    assert "one" not in repr(guard)


def test_http_needs_a_key_except_on_the_open_routes() -> None:
    guard = Guard(["k"])
    assert not guard.admits_http("POST", "/v2/models/m/infer", {})
    assert not guard.admits_http("POST", "/v2/models/m/infer", {"authorization": "Bearer x"})
    assert guard.admits_http("POST", "/v2/models/m/infer", {"authorization": "Bearer k"})
    assert guard.admits_http("POST", "/v2/models/m/infer", {"x-api-key": "k"})
    for method, pattern in OPEN_HTTP:
        assert guard.admits_http(method, pattern, {})
    assert not guard.admits_http("POST", "/v2/health/live", {})  # open for GET only
    assert not guard.admits_http("GET", "/metrics", {})


def test_grpc_needs_a_key_except_on_the_probes() -> None:
    guard = Guard(["k"])
    infer = "/inference.GRPCInferenceService/ModelInfer"
    assert not guard.admits_grpc(infer, [])
    assert not guard.admits_grpc(infer, [("authorization", "Bearer nope")])
    assert guard.admits_grpc(infer, [("authorization", "Bearer k")])
    assert guard.admits_grpc(infer, [("x-api-key", "k")])
    assert all(guard.admits_grpc(path, []) for path in OPEN_GRPC)
    assert not guard.admits_grpc("/grpc.health.v1.Health/Watch", [])


def test_the_refusal_is_401_unauthenticated_with_a_bearer_challenge() -> None:
    refusal = Guard(["secret-key"]).refusal()
    assert refusal.kind is ErrorKind.UNAUTHENTICATED
    assert (refusal.http_status, refusal.kind.grpc) == (401, 16)
    assert refusal.headers == {"www-authenticate": "Bearer"}
    assert "secret-key" not in refusal.message


# -- weights: each key a tenant of the queues (core/share.py) ----------------------------------


def test_a_key_file_line_may_weigh_its_key(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("plain\nheavy weight=4\n# note weight=9\nlight   weight=0.5\n")
    assert read_weighted_keys(keys) == {"plain": 1.0, "heavy": 4.0, "light": 0.5}
    assert gather_keys([], [keys], {}) == ("plain", "heavy", "light")  # as before weights
    assert key_weights([keys]) == {"heavy": 4.0, "light": 0.5}


@pytest.mark.parametrize(
    "line", ["k weight=0", "k weight=-1", "k weight=nan", "k weight=", "k 4", "k weight=2 x"]
)
def test_a_weight_is_a_positive_number_alone_after_its_key(tmp_path: Path, line: str) -> None:
    keys = tmp_path / "keys"
    keys.write_text(f"fine\n{line}\n")
    with pytest.raises(KeySourceError) as caught:
        read_weighted_keys(keys)
    assert "line 2: after the key, only weight=W" in str(caught.value)
    assert "k " not in str(caught.value).split(":", 1)[1]  # the key is never in the message


def test_the_guard_hands_each_request_its_keys_tenant() -> None:
    guard = Guard(["a", "b"], {"b": 3.0})
    first = guard.admits_http("POST", "/v2/models/m/infer", {"x-api-key": "a"})
    second = guard.admits_grpc("/inference.GRPCInferenceService/ModelInfer", [("x-api-key", "b")])
    assert first is not None
    assert second is not None
    assert (first.tenant, first.weight, second.tenant, second.weight) == ("key#1", 1, "key#2", 3)
    assert guard.admits_http("GET", "/v2/health/ready", {}) is DEFAULT  # open: no tenant
    guard.replace(["b"], {})
    again = guard.admits_http("POST", "/x", {"authorization": "Bearer b"})
    assert again is not None
    assert (again.tenant, again.weight) == ("key#1", 1)
