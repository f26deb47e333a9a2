"""What an instance's PD role is configured with, as the process (server/settings.py) hands it
down: pd/ reads its own options, never the server's settings."""

from __future__ import annotations

from dataclasses import dataclass

ROLES = ("mixed", "prefill", "decode")


@dataclass(frozen=True)
class PdOptions:
    """Prefill/decode disaggregation (rosettaserve.pd): the instance side."""

    kv_lease_s: float = 30.0  # a prefill instance frees a cache no decode instance fetched
    kv_lease_budget: int = 0  # bytes of caches a prefill instance holds; 0: a quarter of memory
    max_kv_bytes: int = 1 << 30  # the largest KV cache sent or accepted
    heartbeat_s: float = 5.0  # /dresult: ka:heartbeat after this long without a frame
    peer_timeout_s: float = 10.0  # an instance waiting on another instance
    advertise_host: str = ""  # the address other instances reach this one at (default: --host)
    peer_allow: tuple[str, ...] = ()  # the only instances this one contacts (pd/peers.py)
