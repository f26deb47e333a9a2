"""The response cache's first tier (protocols/oip/answer_tier.py, its entries in
scheduling/response_cache.py): keyed by the request's bytes, its headers read, the protocol and
the load; requests naming shared memory, escaped JSON and large bodies never keyed; a hit counted
in the version's statistics; entries in the cache's one byte budget."""

from __future__ import annotations

from typing import Any

import pytest

from rosettaserve.core.dataplane import DataPlane
from rosettaserve.core.registry import ModelVersion, VersionState
from rosettaserve.protocols.oip import answer_tier
from rosettaserve.scheduling.response_cache import (
    CachedInvoker,
    ResponseCache,
    Scope,
    encoded_key,
    request_key,
)
from tests.unit.metrics_support import OneModel

BODY = b'{"inputs":[{"name":"X","datatype":"FP32","shape":[1],"data":[1.0]}]}'


class Never:
    """An invoker the tier never reaches."""

    streams = False
    waiting = None

    async def predict(self, inputs: Any, parameters: Any, call: Any = None) -> Any:
        raise AssertionError("the tier does not run the model")

    def stream(self, inputs: Any, parameters: Any, call: Any = None) -> Any:
        raise AssertionError("the tier does not run the model")


def plane(capacity: int = 1 << 20) -> tuple[DataPlane, ModelVersion, ResponseCache]:
    mv = ModelVersion("m", "1", "python", state=VersionState.READY)
    cache = ResponseCache(capacity)
    mv.invoker = mv.answers = CachedInvoker(Never(), cache, mv)
    dp = DataPlane(OneModel(mv))
    dp.answers_cached = True
    return dp, mv, cache


def rest_slot(dp: DataPlane, body: bytes = BODY, header: str | None = None) -> Any:
    return answer_tier.slot(dp, "oip_rest", ("m", ""), header, body)


def test_equal_parts_make_equal_keys_and_any_other_part_another() -> None:
    scope = Scope("m", "1")
    parts = ("oip_rest", "m", "", None, BODY)
    assert encoded_key(scope, parts) == encoded_key(scope, tuple(parts))
    for other in (
        ("oip_grpc", "m", "", None, BODY),
        ("oip_rest", "m", "1", None, BODY),
        ("oip_rest", "m", "", "12", BODY),
        ("oip_rest", "m", "", "", BODY),  # an empty header is not no header
        ("oip_rest", "m", "", None, BODY.replace(b"1.0", b"2.0")),
    ):
        assert encoded_key(scope, other) != encoded_key(scope, parts)
    assert encoded_key(Scope("m", "1"), parts) != encoded_key(scope, parts)  # another load


def test_an_encoded_key_never_equals_a_tensor_key() -> None:
    scope = Scope("m", "1")
    tensor = request_key(scope, {}, {})
    assert tensor is not None
    assert encoded_key(scope, ()) != tensor


def test_a_kept_answer_is_found_by_the_same_bytes_and_counted_as_a_hit() -> None:
    dp, mv, cache = plane()
    miss = rest_slot(dp, header="70")
    assert answer_tier.hit(dp, miss, 1) is None
    assert mv.stats.cache_hit.count == 0  # (the tensor path counts the miss)
    miss.keep(b'{"outputs":[]}', [memoryview(b"\x00\x01")], 14)
    assert cache.used > len(BODY) + 16  # the entry's bytes in the one budget
    again = rest_slot(dp, header="70")
    assert answer_tier.hit(dp, again, 1) == (b'{"outputs":[]}', (b"\x00\x01",), 14)
    assert (mv.stats.cache_hit.count, mv.stats.success.count) == (1, 1)
    assert answer_tier.hit(dp, rest_slot(dp, header=None), 1) is None


@pytest.mark.parametrize(
    "body",
    [
        BODY.replace(b'"data":[1.0]', b'"parameters":{"shared_memory_region":"r"}'),
        BODY.replace(b'"X"', b'"\\u0058"'),  # an escape may spell any key
        b" " * (answer_tier.MAX_BYTES + 1) + BODY,
    ],
    ids=["shared-memory", "escape", "large"],
)
def test_requests_whose_bytes_may_not_decide_the_answer_are_not_keyed(body: bytes) -> None:
    dp, _, _ = plane()
    assert rest_slot(dp, body) is None


def test_no_slot_without_the_cache_or_a_ready_cached_version_or_a_known_model() -> None:
    dp, mv, _ = plane()
    assert answer_tier.slot(dp, "oip_rest", ("other", ""), None, BODY) is None
    mv.state = VersionState.UNLOADING
    assert rest_slot(dp) is None
    mv.state, mv.answers = VersionState.READY, None
    assert rest_slot(dp) is None
    dp, _, _ = plane()
    dp.answers_cached = False
    assert rest_slot(dp) is None


def test_a_large_answer_is_left_to_the_tensor_path() -> None:
    dp, _, cache = plane()
    rest_slot(dp).keep(b"{}", [b"\x00" * answer_tier.MAX_BYTES], 2)
    assert len(cache) == 0
