"""Checking one answer before a case is measured: send the case's body once over REST or gRPC and
compare the output with the input (identity servers) or only the status (the constant-answer
ceilings).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import tls_cert
from bodies import Body
from processes import HOST, Server
from spec import ServerSpec

GRPC_INFER = "/inference.GRPCInferenceService/ModelInfer"


def rest_output(
    spec: ServerSpec, headers: dict[str, str], body: bytes, datatype: str = "FP32"
) -> np.ndarray[Any, Any]:
    """The output's values, flat: float32 (from JSON or binary data), or for BYTES the JSON
    strings as an object array."""
    split = headers.get("inference-header-content-length")
    head = json.loads(body[: int(split)] if split else body)
    outputs = head.get("outputs") or []
    offset = int(split) if split else 0
    for out in outputs:
        size = (out.get("parameters") or {}).get("binary_data_size")
        if out.get("name") == spec.output_name or len(outputs) == 1:
            if size is not None:
                return np.frombuffer(body[offset : offset + int(size)], "<f4")
            if datatype == "BYTES":
                return np.asarray(out["data"], dtype=object).reshape(-1)
            return np.asarray(out["data"], dtype=np.float32).reshape(-1)
        offset += int(size or 0)
    raise ValueError(f"no output {spec.output_name} in the answer: {str(head)[:200]}")


def post(
    server: Server, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    conn = server.http_connection(timeout=120)
    try:
        conn.request("POST", path, body, headers)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


def check_rest(server: Server, body: Body) -> str:
    """'' if the answer is right, else what is wrong."""
    spec = server.spec
    status, headers, data = post(server, f"/v2/models/{body.model}/infer", body.data, body.headers)
    if status != 200:
        return f"HTTP {status}: {data[:300]!r}"
    if spec.ceiling:
        return ""
    try:
        out = rest_output(spec, headers, data, "BYTES" if body.tensor.dtype == object else "FP32")
    except (ValueError, KeyError, TypeError) as exc:
        return f"unreadable answer: {exc}"
    if out.shape != (body.tensor.size,) or not np.array_equal(out, body.tensor.reshape(-1)):
        return f"output differs from the input (first values {out[:4].tolist()})"
    return ""


def check_grpc(server: Server, body: Body) -> tuple[str, int]:
    """('' or what is wrong, size of the answer's gRPC message)."""
    import grpc

    from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb

    limit = 64 * 1024 * 1024
    options = [("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit)]
    target = f"{HOST}:{server.grpc_port}"
    if server.spec.tls:
        credentials = grpc.ssl_channel_credentials(tls_cert.certificate()[0].read_bytes())
        channel = grpc.secure_channel(target, credentials, options=options)
    else:
        channel = grpc.insecure_channel(target, options=options)
    with channel:
        call = channel.unary_unary(
            GRPC_INFER,
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        try:
            answer: bytes = call(body.data, timeout=120)
        except grpc.RpcError as exc:
            return f"gRPC {exc.code()}: {exc.details()}", 0
    if server.spec.ceiling:
        return "", len(answer)
    response = pb.ModelInferResponse.FromString(answer)
    names = [o.name for o in response.outputs]
    if server.spec.output_name not in names and len(names) != 1:
        return f"no output {server.spec.output_name} in {names}", len(answer)
    i = names.index(server.spec.output_name) if server.spec.output_name in names else 0
    if len(response.raw_output_contents) > i:
        out = np.frombuffer(response.raw_output_contents[i], "<f4")
    else:
        out = np.asarray(response.outputs[i].contents.fp32_contents, dtype=np.float32)
    if not np.array_equal(out, body.tensor.reshape(-1)):
        return f"output differs from the input (first values {out[:4].tolist()})", len(answer)
    return "", len(answer)
