"""Server configuration: one typed object, built once at start and passed down."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_MAX_REQUEST_SIZE = 256 * 1024 * 1024
DEFAULT_GRPC_MAX_MESSAGE_SIZE = 512 * 1024 * 1024  # a 256 MiB tensor and then some


@dataclass(frozen=True)
class Settings:
    repository: Path
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    grpc_max_message_size: int = DEFAULT_GRPC_MAX_MESSAGE_SIZE
    enable_model_control: bool = False
    max_request_size: int = DEFAULT_MAX_REQUEST_SIZE
    poll_interval: float = 0.0  # seconds; 0 = off
    strict_readiness: bool = True
    grps_default_model: str = ""  # grps requests that name no model: `name` or `name-version`
    log_level: str = "info"
