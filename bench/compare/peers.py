"""The peers (MLServer 1.7, KServe 0.21, Triton through PyTriton 0.7, LitServe 0.2) and the
ceilings (bare uvicorn, bare grpc.aio).

Each runs from its own virtual environment under ``bench/.venvs/`` (``bash
bench/compare/setup_peers.sh`` creates them); the models and apps are in ``bench/compare/peers/``.
"""

from __future__ import annotations

from pathlib import Path

import tls_cert
from spec import (
    GRPC_RAW_1MIB,
    GRPC_SMALL,
    GRPC_SMALL_TLS,
    MEDIUM_CASES,
    REST_BYTES,
    REST_JSON_1MIB,
    REST_SMALL,
    REST_SMALL_TLS,
    ServerSpec,
)


def venv_bin(root: Path, venv: str, program: str = "python") -> str:
    return str(root / "bench" / ".venvs" / venv / "bin" / program)


def peer_specs(root: Path) -> list[ServerSpec]:
    peers = root / "bench" / "compare" / "peers"
    mlserver = ServerSpec(
        name="MLServer 1.7 (best)",
        key="mlserver",
        argv=(venv_bin(root, "mlserver", "mlserver"), "start", "."),
        env={
            "MLSERVER_HTTP_PORT": "{http_port}",
            "MLSERVER_GRPC_PORT": "{grpc_port}",
            "PYTHONUNBUFFERED": "1",
        },
        cwd=str(peers / "mlserver_repo"),
        models={REST_BYTES: "identity_bytes"},
        cases=frozenset({REST_SMALL, GRPC_SMALL, REST_JSON_1MIB, GRPC_RAW_1MIB, *MEDIUM_CASES}),
        notes=(
            "MLServer 1.7.1: parallel_workers 0, debug off (no access log), metrics off "
            "(metrics_endpoint null: no Prometheus middleware/interceptor), gzip middleware off; "
            "uvloop, httptools and orjson installed. It has no REST binary tensor data extension "
            "(rest_binary_1mib not served); gRPC raw input is unpacked to a Python list and packed "
            "back by MLServer itself."
        ),
    )
    kserve = ServerSpec(
        name="KServe 0.21 (1 worker)",
        key="kserve",
        argv=(
            venv_bin(root, "kserve"),
            str(peers / "kserve_identity.py"),
            "--model_name=identity",
            "--http_port={http_port}",
            "--grpc_port={grpc_port}",
            "--workers=1",
            "--uvloop",
            "--enable_latency_logging=false",
            f"--log_config_file={peers / 'kserve_logging.json'}",
        ),
        env={"PYTHONUNBUFFERED": "1"},
        # KServe takes a POST body without "Content-Type: application/json" for the binary
        # extension (400 without Inference-Header-Content-Length): JSON requests must send it.
        notes=(
            "KServe 0.21.0: one worker (REST and gRPC in one process), uvloop event loop (set by "
            "the launcher: KServe's --event-loop does not reach a one-worker server), per-request "
            "logs off (latency log, uvicorn access log, gRPC interceptor's INFO line). Its REST "
            "binary extension decodes the input into a Python list (about 0.3 s per MiB)."
        ),
    )
    uvicorn_const = ServerSpec(
        name="uvicorn + bare ASGI, constant answer",
        key="uvicorn_const",
        argv=(
            venv_bin(root, "ceilings"),
            "-m",
            "uvicorn",
            "uvicorn_const:app",
            f"--app-dir={peers}",
            "--host=127.0.0.1",
            "--port={http_port}",
            "--loop=uvloop",
            "--http=httptools",
            "--lifespan=off",
            "--log-level=warning",
            "--no-access-log",
        ),
        cases=frozenset({REST_SMALL}),
        ceiling=True,
        notes="uvicorn 0.54.0 (uvloop, httptools), no framework: reads the body, sends a constant.",
    )
    grpcio_const = ServerSpec(
        name="grpc.aio, constant answer",
        key="grpcio_const",
        argv=(venv_bin(root, "ceilings"), str(peers / "grpcio_const.py"), "{grpc_port}"),
        ready_path=None,
        cases=frozenset({GRPC_SMALL}),
        ceiling=True,
        notes="grpcio 1.85.1 aio, generic handler on bytes: no protobuf work per call.",
    )
    cert, key = tls_cert.certificate()
    uvicorn_const_tls = ServerSpec(
        name="uvicorn + bare ASGI over TLS, constant answer",
        key="uvicorn_const_tls",
        argv=(*uvicorn_const.argv, f"--ssl-certfile={cert}", f"--ssl-keyfile={key}"),
        cases=frozenset({REST_SMALL_TLS}),
        ceiling=True,
        tls=True,
        notes="the same uvicorn ceiling with --ssl-certfile/--ssl-keyfile (the same certificate).",
    )
    grpcio_const_tls = ServerSpec(
        name="grpc.aio over TLS, constant answer",
        key="grpcio_const_tls",
        argv=(*grpcio_const.argv, str(cert), str(key)),
        ready_path=None,
        cases=frozenset({GRPC_SMALL_TLS}),
        ceiling=True,
        tls=True,
        notes="the same grpc.aio ceiling on a secure port (ssl_server_credentials, same cert).",
    )
    return [
        mlserver,
        kserve,
        *triton_specs(root),
        litserve_spec(root),
        uvicorn_const,
        grpcio_const,
        uvicorn_const_tls,
        grpcio_const_tls,
    ]


def triton_specs(root: Path) -> list[ServerSpec]:
    """Triton's own server as PyTriton runs it (peers/pytriton_identity.py), batching off and on."""
    app = str(root / "bench" / "compare" / "peers" / "pytriton_identity.py")
    common = (
        "Triton Inference Server 2.51 (the tritonserver binary of nvidia-pytriton 0.7.0), Python "
        "backend: a stub process per model runs pytriton's proxy, which hands each call to the "
        "identity callable in the app's process (ZeroMQ and shared memory); CPU only, metrics "
        "off; `identity_bytes` for BYTES."
    )
    off = ServerSpec(
        name="Triton (PyTriton 0.7)",
        key="pytriton",
        argv=(venv_bin(root, "pytriton"), app, "{http_port}", "{grpc_port}"),
        env={"PYTHONUNBUFFERED": "1"},
        # pytriton loads the models one after the other once Triton is up, identity_bytes last
        ready_path="/v2/models/identity_bytes/ready",
        models={REST_BYTES: "identity_bytes"},
        notes=common + " Batching off: max_batch_size 0.",
    )
    on = ServerSpec(
        name="Triton (PyTriton 0.7), dynamic batching",
        key="pytriton_batching",
        argv=(*off.argv, "--batching"),
        env=off.env,
        ready_path=off.ready_path,
        models=off.models,
        notes=(
            common + " Dynamic batching on: max_batch_size 64, max_queue_delay_microseconds 0 "
            "(batches what is queued), the callable under pytriton's @batch (stacks and splits)."
        ),
    )
    return [off, on]


def litserve_spec(root: Path) -> ServerSpec:
    app = str(root / "bench" / "compare" / "peers" / "litserve_identity.py")
    return ServerSpec(
        name="LitServe 0.2 (its own JSON API)",
        key="litserve",
        argv=(venv_bin(root, "litserve"), app, "{http_port}"),
        env={"PYTHONUNBUFFERED": "1"},
        ready_path="/health",
        cases=frozenset({REST_SMALL, REST_JSON_1MIB, *MEDIUM_CASES}),
        notes=(
            "LitServe 0.2.19 has no OIP: a LitAPI of ours at /v2/models/identity/infer takes the "
            "same OIP JSON body (LitServe parses the JSON, the first input goes to the inference "
            "worker as parsed and comes back as OUTPUT0 in an OIP-shaped answer: its own API, "
            "not a protocol it implements). One uvicorn API server (uvloop, httptools) and one "
            "inference worker process; no gRPC, no binary extension."
        ),
    )
