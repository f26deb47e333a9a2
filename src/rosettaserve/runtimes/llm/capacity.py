"""The engine's capacity: ``max_num_seqs + max_waiting`` sequences, shared between API keys.

A request is refused at once (``Overloaded``: 429 / RESOURCE_EXHAUSTED) rather than queued when
its ``n`` sequences would take the engine past its capacity, so latency cannot grow without
bound. With API keys (core/share.py: each a tenant with a weight) the capacity is shared by the
queue limit's rule (core/queue_limit.py, ``Tenants.refusal``), counted in sequences: past it, a
request is still admitted while its tenant's sequences, with its own, stay within the tenant's
weighted share of the capacity, so one key's flood cannot have another key's requests refused;
at twice the capacity everyone is refused. Without keys (one tenant) it is the plain limit, as
before tenants.

Every sequence is counted, by its tenant, from ``take`` (the request submitted) to
``give_back`` (the engine retires it: finished, handed over, preempted, cancelled, failed, the
model unloaded), both under the engine's lock. Runtime vllm counts a request's ``n`` sequences
with ``admit`` and ``release`` (runtimes/vllm/engine.py: from submission to its stream's end).
"""

from __future__ import annotations

from rosettaserve.core.errors import Overloaded
from rosettaserve.core.queue_limit import ADMITTED, AT_LIMIT, AT_TWICE, Tenants
from rosettaserve.core.share import Share
from rosettaserve.runtimes.llm.state import Sequence


class Capacity:
    """The sequences in the engine (submitted, not yet retired), in all and by tenant."""

    __slots__ = ("active", "limit", "tenants")

    def __init__(self, limit: int) -> None:
        self.limit = limit  # max_num_seqs + max_waiting
        self.active = 0
        self.tenants = Tenants()

    def take(self, seqs: list[Sequence], share: Share) -> None:
        """Count ``seqs`` (one request's) as ``share``'s, or refuse them (``Overloaded``)."""
        self.admit(share, len(seqs))
        for seq in seqs:
            seq.share = share

    def give_back(self, seqs: list[Sequence]) -> None:
        """``seqs`` left the engine (each given back once: the engine retires it once)."""
        for seq in seqs:
            self.release(seq.share, 1)

    def admit(self, share: Share, need: int) -> None:
        """Count ``need`` sequences (one request's) as ``share``'s, or refuse them
        (``Overloaded``); an engine that keeps no ``Sequence`` of its own (runtime vllm) calls
        this and ``release`` directly."""
        active, limit = self.active, self.limit
        why = self.tenants.refusal(share, active, need, limit, limit)
        if why != ADMITTED:
            where = f"{active} sequences running or queued"
            if why == AT_LIMIT:
                where += f", limit {limit})"
            elif why == AT_TWICE:
                where += f", twice its limit of {limit})"
            else:
                held = self.tenants.held.get(share.tenant, 0)
                where += f", limit {limit}) and {held} of those are this API key's, its share"
            raise Overloaded(f"the model is at capacity ({where}; retry later")
        self.active += need
        self.tenants.hold(share, need)

    def release(self, share: Share, count: int) -> None:
        """``count`` sequences ``admit`` counted as ``share``'s left the engine (once each)."""
        self.active -= count
        self.tenants.release(share, count)
