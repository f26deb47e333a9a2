"""Ceiling for gRPC: a bare grpc.aio server answering ModelInfer with one constant response.

Run: python grpcio_const.py PORT [CERT KEY]   (with CERT and KEY: a TLS port)

No generated code and no protobuf work per call: the handler takes the request as bytes and
returns a ModelInferResponse serialized once at start, the identity response for
INPUT0 = [[1, 2, 3, 4]] (FP32 [1,4], typed fp32_contents).
"""

from __future__ import annotations

import asyncio
import struct
import sys

import grpc

SERVICE = "inference.GRPCInferenceService"


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): strings, messages, packed repeated scalars."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def infer_response() -> bytes:
    """ModelInferResponse{model_name, outputs: [InferOutputTensor{name, datatype, shape,
    contents: InferTensorContents{fp32_contents}}]} with the proto's field numbers."""
    contents = _field(6, struct.pack("<4f", 1.0, 2.0, 3.0, 4.0))
    shape = b"".join(_varint(dim) for dim in (1, 4))
    tensor = _field(1, b"OUTPUT0") + _field(2, b"FP32") + _field(3, shape) + _field(5, contents)
    return _field(1, b"identity") + _field(5, tensor)


RESPONSE = infer_response()


async def model_infer(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return RESPONSE


async def serve(port: int, tls: tuple[str, str] | None = None) -> None:
    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(model_infer)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, {"ModelInfer": handler}),)
    )
    if tls is None:
        server.add_insecure_port(f"127.0.0.1:{port}")
    else:
        with open(tls[0], "rb") as cert, open(tls[1], "rb") as key:
            pair = (key.read(), cert.read())
        server.add_secure_port(f"127.0.0.1:{port}", grpc.ssl_server_credentials([pair]))
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), (sys.argv[2], sys.argv[3]) if len(sys.argv) > 3 else None))
