"""tritonclient.grpc tests run in their own pytest process: ``pytest tests_tritongrpc``.

``tritonclient.grpc`` and ``kserve`` register clashing protobuf descriptors, so the two cannot be
imported by one interpreter; the main run (``pytest tests``) imports kserve, this directory
imports tritonclient.grpc. The server fixtures are the main suite's own.
"""

from tests.conftest import iris, mlp_session, repo, server  # noqa: F401
