"""A request's place in the queues: its priority and whose request it is.

The queues that order work (the dynamic batcher, the LLM engine's admission) serve requests by
priority first (a lower value earlier, 0 the default: vLLM's meaning), then share the server
between clients by weighted fair queueing: each API key is a tenant with a weight (the key
file's ``weight=``), and a tenant's requests advance its own virtual clock by their cost over its
weight (scheduling/fair_share.py).

Who sets it, for the request being served (a context variable: every transport runs a request
in a context of its own, so it travels from the edge to the queue without a layer in between
knowing of it):
  - the key check (rosettaserve.security): the tenant of the key the request carries;
  - the transports: the ``X-Priority`` header (gRPC metadata ``x-priority``) on every protocol;
  - the protocols: a priority field of their own, which wins over the header (vLLM's
    ``priority``: ``prioritise``; OIP's ``priority`` parameter, in Triton's meaning: in the
    request's context under ``PRIORITY``, set here by the data plane, since a large request is
    parsed on another thread).
Without keys or priorities every request has ``DEFAULT``: one tenant, priority 0, first come
first served.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Final

from rosettaserve.core.errors import InvalidInput

HEADER: Final = "x-priority"  # HTTP X-Priority, gRPC metadata x-priority
PRIORITY: Final = "priority"  # InferenceRequest.context: a protocol's own priority field
# the scale of priorities (a 32-bit signed integer, as vLLM's field fits in); lower: earlier
MIN_PRIORITY: Final = -(2**31)
MAX_PRIORITY: Final = 2**31 - 1
# Triton's levels (OIP's ``priority`` parameter): 1 the highest, 0 the model's default level
MAX_TRITON_LEVEL: Final = 2**31


class Share:
    """Whose request (``tenant``: the key's name, "" without keys), its weight against the other
    tenants', and its priority."""

    __slots__ = ("priority", "tenant", "weight")

    def __init__(self, tenant: str, weight: float, priority: int) -> None:
        self.tenant = tenant
        self.weight = weight
        self.priority = priority

    def __repr__(self) -> str:
        return f"Share({self.tenant!r}, weight={self.weight:g}, priority={self.priority})"

    def prioritised(self, priority: int) -> Share:
        return Share(self.tenant, self.weight, priority)


DEFAULT: Final = Share("", 1.0, 0)
SHARE: Final[ContextVar[Share]] = ContextVar("rosettaserve_share", default=DEFAULT)


def priority(value: object, where: str) -> int:
    """A priority a client sent (a JSON number or a header's text), checked: 400 otherwise."""
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text)
        except ValueError:
            raise InvalidInput(
                f"{where} must be a whole number (lower: served earlier), got {text[:40]!r}"
            ) from None
    if type(value) is not int:
        raise InvalidInput(
            f"{where} must be a whole number (lower: served earlier), got {value!r:.40}"
        )
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise InvalidInput(
            f"{where} must be in [{MIN_PRIORITY}, {MAX_PRIORITY}] (lower: served earlier), "
            f"got {value}"
        )
    return value


def triton_level(value: object, where: str) -> int | None:
    """Triton's ``priority`` parameter on this scale: 0 is the default level (None: the
    request's priority is left as it is; past the last level, 2**31, too, as Triton takes it);
    1 is the highest level, 2 the next, and so on, every level before the default one (as with
    Triton's usual ``default_priority_level``, the lowest): level n is priority n - 2**31 - 1."""
    if type(value) is not int or value < 0:
        raise InvalidInput(
            f"{where} must be a Triton priority level: a whole number, 1 the highest, 0 the "
            f"default; got {value!r:.40}"
        )
    # past the last level: the default, as Triton takes it (tritonclient sends any uint64)
    return None if value == 0 or value > MAX_TRITON_LEVEL else value - MAX_TRITON_LEVEL - 1


def prioritise(value: int) -> None:
    """The request being served has priority ``value`` (a protocol's own field)."""
    SHARE.set(SHARE.get().prioritised(value))


def edge(tenant: Share | None, header: str | None) -> Share | None:
    """What a transport sets for a request: the key's tenant (None: no key configured or an open
    route) with the ``X-Priority`` header's priority (None: no header); None: the default."""
    if header is None:
        return tenant
    return (tenant or DEFAULT).prioritised(priority(header, "the X-Priority header"))
