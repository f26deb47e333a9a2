"""OIP gRPC ModelInfer calls with grpcio's own client, for the tests that need a gRPC call to
count, trace, log or spread over workers rather than to test the call itself."""

from __future__ import annotations

import grpc

from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb


def model_infer(
    address: str,
    request: pb.ModelInferRequest,
    metadata: tuple[tuple[str, str], ...] = (),
    timeout: float = 30.0,
) -> pb.ModelInferResponse:
    """``request`` over a new plaintext channel to ``address``, on a connection of its own; the
    reply (an error raises)."""
    # grpcio otherwise hands a new channel the connection a closed one left in its process-wide
    # pool: 40 channels made one connection, so --workers' calls all went to one worker
    options = [("grpc.use_local_subchannel_pool", 1)]
    with grpc.insecure_channel(address, options) as channel:
        infer = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        reply: pb.ModelInferResponse = infer(request, timeout=timeout, metadata=metadata)
        return reply


def infer_half_plus_two(
    address: str, metadata: tuple[tuple[str, str], ...] = (), timeout: float = 30.0
) -> pb.ModelInferResponse:
    """The half_plus_two example on x = [3.0]."""
    msg = pb.ModelInferRequest(model_name="half_plus_two")
    msg.inputs.add(name="x", datatype="FP32", shape=[1]).contents.fp32_contents.append(3.0)
    return model_infer(address, msg, metadata, timeout)
