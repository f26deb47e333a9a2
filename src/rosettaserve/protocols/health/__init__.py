"""The standard gRPC health service (grpc.health.v1.Health), for orchestrators' gRPC probes."""
