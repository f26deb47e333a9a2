"""What a parser may raise on hostile bytes: the project's own errors, each a client's fault."""

from __future__ import annotations

from rosettaserve.core.errors import ServingError


def assert_a_refusal(exc: BaseException) -> None:
    """``exc`` must be a ServingError whose answer is a 4xx: anything else is a crash."""
    if not isinstance(exc, ServingError):
        raise exc
    assert exc.http_status < 500, f"a {exc.http_status} for bad input: {exc.message}"
