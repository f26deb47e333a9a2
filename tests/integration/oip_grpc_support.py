"""One OIP gRPC ModelInfer call of the half_plus_two example with grpcio's own client, for the
tests that need a gRPC call to count, trace or log rather than to test the call itself."""

from __future__ import annotations

import grpc

from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb


def infer_half_plus_two(
    address: str, metadata: tuple[tuple[str, str], ...] = (), timeout: float = 30.0
) -> pb.ModelInferResponse:
    """x = [3.0] over a plaintext channel to ``address``; the reply (an error raises)."""
    msg = pb.ModelInferRequest(model_name="half_plus_two")
    msg.inputs.add(name="x", datatype="FP32", shape=[1]).contents.fp32_contents.append(3.0)
    with grpc.insecure_channel(address) as channel:
        infer = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        reply: pb.ModelInferResponse = infer(msg, timeout=timeout, metadata=metadata)
        return reply
