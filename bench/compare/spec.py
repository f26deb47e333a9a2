"""What the comparison needs to know about one server: how to start it and what it serves.

Each server under test (rosettaserve, the peers, the ceilings) is one ``ServerSpec``. The driver
starts it pinned to the server core, waits until it is ready, measures, and stops it with SIGTERM.
``argv`` and ``env`` values may hold ``{http_port}`` and ``{grpc_port}``: the driver picks free
ports and formats them in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The cases of the comparison; a server lists the ones it can serve.
REST_SMALL = "rest_small"  # FP32 [1,4], OIP REST JSON
GRPC_SMALL = "grpc_small"  # FP32 [1,4], OIP gRPC ModelInfer (typed fp32_contents)
REST_JSON_1MIB = "rest_json_1mib"  # FP32 [1,262144], OIP REST JSON
REST_BINARY_1MIB = "rest_binary_1mib"  # FP32 [1,262144], OIP REST binary tensor data extension
GRPC_RAW_1MIB = "grpc_raw_1mib"  # FP32 [1,262144], OIP gRPC raw_input_contents
REST_JSON_64X1024 = "rest_json_64x1024"  # FP32 [64,1024], OIP REST JSON
REST_BYTES = "rest_bytes"  # BYTES [1,128] (strings of 1-32 letters), OIP REST JSON
MEDIUM_CASES = (REST_JSON_64X1024, REST_BYTES)
CASES = (
    REST_SMALL,
    GRPC_SMALL,
    REST_JSON_1MIB,
    REST_BINARY_1MIB,
    GRPC_RAW_1MIB,
    *MEDIUM_CASES,
)
# The same small requests over TLS (served by the servers started with TLS: ``tls=True``)
REST_SMALL_TLS = "rest_small_tls"  # rest_small over HTTPS
GRPC_SMALL_TLS = "grpc_small_tls"  # grpc_small over TLS (ALPN h2)
TLS_CASES = (REST_SMALL_TLS, GRPC_SMALL_TLS)
GRPC_CASES = (GRPC_SMALL, GRPC_RAW_1MIB, GRPC_SMALL_TLS)
SMALL_CASES = (REST_SMALL, GRPC_SMALL, *TLS_CASES)


@dataclass(frozen=True)
class ServerSpec:
    name: str  # row label in the table, e.g. "MLServer 1.7 (best)"
    key: str  # short id for files and flags, e.g. "mlserver"
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    model: str = "identity"  # model name in /v2/models/{model}/infer and ModelInferRequest
    # another model for some cases (case -> model name): a server whose models declare their
    # datatype serves the BYTES case from a model of its own
    models: dict[str, str] = field(default_factory=dict)
    input_name: str = "INPUT0"
    output_name: str = "OUTPUT0"
    # Readiness: an HTTP path on the http port answering 200 (None: the grpc port accepting TCP).
    ready_path: str | None = "/v2/health/ready"
    cases: frozenset[str] = frozenset(CASES)
    ceiling: bool = False  # a constant-answer app: a ceiling, not a server under comparison
    tls: bool = False  # both ports speak TLS (certificate: tls_cert.py), clients do not verify
    notes: str = ""  # shown under the table (config used, what a missing case means)

    def model_for(self, case: str) -> str:
        return self.models.get(case, self.model)
