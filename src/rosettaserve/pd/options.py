"""What the PD roles and the scheduler are configured with, as the process (server/, cli/)
hands it down: pd/ reads its own options, never the server's settings."""

from __future__ import annotations

from dataclasses import dataclass

from rosettaserve.core.generation_plane import DEFAULT_RESPONSES_STORE

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


@dataclass(frozen=True)
class SchedulerOptions:
    prefill: tuple[str, ...]
    decode: tuple[str, ...]
    host: str = "127.0.0.1"
    http_port: int = 8000
    policy: str = "prefix"  # or load, round-robin
    max_retry: int = 5  # recomputes of one request
    prefill_timeout_s: float = 300.0  # a prefill instance's answer (prefill and handover)
    token_timeout_s: float = 60.0  # the longest silence of a decode instance on one request
    poll_s: float = 1.0
    discovery_s: float = 10.0  # instance URLs naming a host: looked up again this often
    max_request_size: int = 64 * 1024 * 1024
    responses_store: int = DEFAULT_RESPONSES_STORE  # Responses API answers kept (oldest out)
