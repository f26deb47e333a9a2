"""The parsed command line as the objects the process is given: ``Settings`` for ``serve``,
``SchedulerOptions`` for ``scheduler``, and the security options both check first."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rosettaserve.pd.options import PdOptions, SchedulerOptions
from rosettaserve.repository.residency import Demand
from rosettaserve.security.keys import KeySourceError, gather_keys, key_weights
from rosettaserve.security.tls import TlsError, TlsFiles
from rosettaserve.server.settings import SecurityOptions, Settings


def security_options(args: argparse.Namespace) -> SecurityOptions:
    """The security flags checked for what goes together; ValueError says what is wrong."""
    if (args.tls_cert is None) != (args.tls_key is None):
        raise TlsError("--tls-cert and --tls-key go together")
    if args.tls_client_ca is not None and args.tls_cert is None:
        raise TlsError("--tls-client-ca needs --tls-cert and --tls-key")
    if (args.peer_cert is None) != (args.peer_key is None):
        raise TlsError("--peer-cert and --peer-key go together")
    tls = None
    if args.tls_cert is not None:
        tls = TlsFiles(args.tls_cert, args.tls_key, args.tls_client_ca)
    static = gather_keys(args.api_key, [])
    return SecurityOptions(
        tls=tls,
        api_keys=gather_keys(static, args.api_key_file, {}),
        api_key_files=tuple(args.api_key_file),
        static_keys=static,
        api_key_weights=key_weights(args.api_key_file),
        peer_ca=args.peer_ca,
        peer_cert=args.peer_cert,
        peer_key=args.peer_key,
        peer_api_key=args.peer_api_key,
    )


def checked_security(args: argparse.Namespace, prog: str) -> SecurityOptions | None:
    """The security options, every file loaded once; None (and why, on stderr): do not start."""
    from rosettaserve.server.security_setup import check

    try:
        options = security_options(args)
        check(options)
    except (TlsError, KeySourceError) as exc:
        print(f"{prog}: cannot start: {exc}", file=sys.stderr)
        return None
    return options


def http_limits_of(args: argparse.Namespace) -> dict[str, Any]:
    """``add_http_limits``'s values by their names in ``Settings`` and ``H1Limits``."""
    return {
        "header_timeout": args.header_timeout,
        "body_timeout": args.body_timeout,
        "body_min_rate": args.body_min_rate,
        "max_request_line": args.max_request_line,
        "max_header_size": args.max_header_size,
        "send_timeout": args.send_timeout,
    }


def serve_settings(args: argparse.Namespace, security: SecurityOptions) -> Settings:
    """``serve``'s options as the server's settings."""
    return Settings(
        repository=args.repository,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        grpc_max_message_size=args.grpc_max_message_size,
        enable_model_control=args.enable_model_control or args.management_port is not None,
        allow_client_shm=args.allow_client_shm == "true",
        management_port=args.management_port,
        max_request_size=args.max_request_size,
        poll_interval=args.poll_interval,
        strict_readiness=args.strict_readiness,
        grps_default_model=args.grps_default_model,
        trust_request_chat_template=args.trust_request_chat_template,
        responses_store=args.responses_store,
        log_level=args.log_level,
        log_format=args.log_format,
        access_log=args.access_log,
        otel_exporter=args.otel_exporter,
        cors_origins=tuple(args.cors_origin),
        workers=args.workers,
        max_queue_size=args.max_queue_size,
        request_timeout_us=max(0, round(args.request_timeout * 1e6)),
        cache_size=args.cache_size,
        drain_grace_s=max(0.0, args.drain_grace),
        stall_timeout_s=max(0.0, args.stall_timeout),
        demand=Demand(args.load, args.memory_budget, args.load_timeout),
        metrics_port=args.metrics_port,
        role=args.role,
        pd=PdOptions(
            kv_lease_s=args.kv_lease,
            kv_lease_budget=args.kv_lease_budget or 0,  # 0: from the memory
            max_kv_bytes=args.max_kv_bytes,
            heartbeat_s=args.dresult_heartbeat,
            advertise_host=args.advertise_host,
            peer_allow=tuple(args.peer_allow),
        ),
        security=security,
        **http_limits_of(args),
    )


def scheduler_options(args: argparse.Namespace) -> SchedulerOptions:
    """``scheduler``'s options as the scheduler's."""
    return SchedulerOptions(
        prefill=tuple(args.prefill),
        decode=tuple(args.decode),
        host=args.host,
        http_port=args.http_port,
        policy=args.policy,
        max_retry=args.max_retry,
        token_timeout_s=args.token_timeout,
        discovery_s=args.discovery_interval,
        responses_store=args.responses_store,
    )
