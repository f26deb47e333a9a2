"""The help texts of `rosettaserve --help` and its commands: what the server is, with examples."""

from __future__ import annotations

import argparse

DESCRIPTION = """\
One Python model server for the serving protocols clients already speak, on two ports:
  HTTP (8000): Open Inference Protocol / KServe V2 REST (/v2/...), TensorFlow Serving REST
               (/v1/models/...), grps REST (/grps/v1/...), the LLM APIs of OpenAI
               (/v1/chat/completions, /v1/completions), TGI and vLLM (/generate), Triton
               generate and MindIE (/infer), Prometheus /metrics and a status page at /
  gRPC (8001): inference.GRPCInferenceService (OIP, Triton's superset), grps, grpc.health.v1
Models are python classes, ONNX files, scikit-learn pickles or transformers causal LMs in a
model repository folder (REPO/<model>/model.yaml). The LLM families can be split between
prefill and decode instances behind `rosettaserve scheduler`."""

EPILOG = """\
examples:
  rosettaserve serve examples/models
  curl -s 127.0.0.1:8000/v2/models/mlp_onnx/infer \\
    -d '{"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}'
  rosettaserve serve REPO --host 0.0.0.0 --tls-cert server.pem --tls-key server.key \\
    --api-key-file keys.txt
  rosettaserve serve --help         # every serving flag with its default

docs: README.md and docs/ (configuration.md lists every flag, security.md every limit)"""

SERVE_DESCRIPTION = """\
Serve every model of a model repository (REPO/<model>/model.yaml; see docs/model-repository.md)
over every protocol: REST on --http-port, gRPC on --grpc-port. The server listens at once;
/v2/health/ready answers 200 once every model is loaded."""

SERVE_EPILOG = """\
examples:
  rosettaserve serve examples/models
  rosettaserve serve REPO --http-port 0 --grpc-port 0      # free ports, printed at start
  rosettaserve serve REPO --workers 4 --max-queue-size 64 --request-timeout 10
  rosettaserve serve REPO --role prefill --http-port 8101 --grpc-port 8111 \\
    --peer-allow 127.0.0.1:8102                           # the decode instance it hands to"""

SCHEDULER_EPILOG = """\
example:
  rosettaserve serve REPO --role prefill --http-port 8101 --grpc-port 8111 \\
    --peer-allow 127.0.0.1:8102 &
  rosettaserve serve REPO --role decode --http-port 8102 --grpc-port 8112 \\
    --peer-allow 127.0.0.1:8101 &
  rosettaserve scheduler --prefill http://127.0.0.1:8101 --decode http://127.0.0.1:8102"""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each flag's help; the description and examples kept as written."""
