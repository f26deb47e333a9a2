"""Transports: HTTP (and later gRPC) servers built from the enabled protocols."""
