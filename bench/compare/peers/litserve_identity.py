"""LitServe 0.2 identity endpoint: the OIP REST JSON body in, its tensor back as OUTPUT0.

Run: python litserve_identity.py HTTP_PORT [--fast-queue]

LitServe has no inference protocol of its own: a ``LitAPI`` decodes whatever JSON its endpoint
is sent (``decode_request``), runs ``predict`` in an inference worker process, and encodes the
answer (``encode_response``). This one is mounted at ``/v2/models/identity/infer`` and written
for the OIP REST JSON body the other servers get, so the load generator sends the same bytes:
the first input goes to the worker as it was parsed (a dict of lists, not decoded into numpy,
like the MLServer and KServe identities) and comes back as ``OUTPUT0`` in an OIP-shaped answer.
No gRPC, no binary tensor data extension: those cases are not served.

LitServe's processes: the main one, one uvicorn API server (uvloop and httptools are in its venv,
uvicorn picks them) and one inference worker, talking through queues (``--fast-queue``: ZeroMQ
instead of a multiprocessing manager's queues). Ready: ``GET /health`` answers 200 once the
worker is up. Per-request logs are off (``log_level`` warning). SIGTERM stops all three.
"""

from __future__ import annotations

import argparse
import signal
from typing import Any

import litserve as ls

PATH = "/v2/models/identity/infer"


class Identity(ls.LitAPI):
    def setup(self, device: str) -> None:
        pass

    # LitServe reads the annotation of ``request`` and the return annotation of
    # ``encode_response`` to pick how the body is parsed and the answer built: none means the
    # body's JSON as parsed (json.loads) in, and the returned dict as JSON out.
    def decode_request(self, request):  # type: ignore[no-untyped-def]
        first: dict[str, Any] = request["inputs"][0]
        return first

    def predict(self, x: dict[str, Any]) -> dict[str, Any]:
        return x

    def encode_response(self, output: dict[str, Any]):  # type: ignore[no-untyped-def]
        tensor = {
            "name": "OUTPUT0",
            "datatype": output["datatype"],
            "shape": output["shape"],
            "data": output["data"],
        }
        return {"model_name": "identity", "outputs": [tensor]}


def interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("http_port", type=int)
    parser.add_argument("--fast-queue", action="store_true", help="ZeroMQ queues")
    args = parser.parse_args()
    # LitServe stops its API server and inference worker on Ctrl+C; SIGTERM alone would end
    # this process and leave them running
    signal.signal(signal.SIGTERM, interrupt)
    server = ls.LitServer(
        Identity(api_path=PATH),
        accelerator="cpu",
        workers_per_device=1,
        fast_queue=args.fast_queue,
        disable_openapi_url=True,
    )
    server.run(
        host="127.0.0.1",
        port=args.http_port,
        num_api_servers=1,
        log_level="warning",
        generate_client_file=False,
        access_log=False,
    )


if __name__ == "__main__":
    main()
