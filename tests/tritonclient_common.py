"""What the tritonclient.http tests and the tritonclient.grpc tests (tests_tritongrpc) share.

Only ``tritonclient.utils`` is imported here: ``tritonclient.grpc`` cannot share a process with
kserve (see tests_tritongrpc/conftest.py), so each suite imports its own client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from tritonclient.utils import InferenceServerException


def expect_error(call: Callable[[], Any], status: str, *fragments: str) -> InferenceServerException:
    """``call()`` fails with this status (``"400"``, ``"StatusCode.NOT_FOUND"``, ...) and a
    message holding each of ``fragments``."""
    with pytest.raises(InferenceServerException) as info:
        call()
    exc = info.value
    assert exc.status() == status, (exc.status(), exc.message())
    for fragment in fragments:
        assert fragment in (exc.message() or ""), exc.message()
    return exc
