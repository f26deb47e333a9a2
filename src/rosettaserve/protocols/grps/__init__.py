"""The grps interface: REST under /grps/v1/, gRPC grps.protos.v1.GrpsService."""
