"""KServe 0.21 identity model: OUTPUT0 is INPUT0, passed through without decoding.

Run: python kserve_identity.py --http_port P --grpc_port G [--uvloop] [any kserve ModelServer flag]

Input that reaches the model as a list goes back as that list: JSON, typed gRPC contents, and
REST binary data (KServe itself turns those bytes into a list before the model sees them). gRPC
raw_input_contents goes back as raw output bytes. KServe encodes the answer as the client asked.

KServe 0.21 with one worker runs its REST and gRPC servers under ``asyncio.run`` on the default
event loop, so ``--event-loop uvloop`` does not reach them; ``--uvloop`` installs uvloop's event
loop policy first (``asyncio.run`` then makes a uvloop loop).
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer, model_server
from kserve.utils.utils import generate_uuid


class Identity(Model):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.ready = True

    async def predict(
        self,
        payload: InferRequest,
        headers: dict[str, str] | None = None,
        response_headers: dict[str, str] | None = None,
    ) -> InferResponse:
        tensor = payload.inputs[0]
        output = InferOutput("OUTPUT0", tensor.shape, tensor.datatype)
        if tensor.data:
            output.data = tensor.data
        else:
            output.set_data_from_numpy(tensor.as_numpy(), binary_data=True)
        return InferResponse(
            response_id=payload.id or generate_uuid(),
            model_name=self.name,
            infer_outputs=[output],
            use_binary_outputs=payload.use_binary_outputs,
            requested_outputs=payload.request_outputs,
        )


def main() -> None:
    parser = argparse.ArgumentParser(parents=[model_server.parser])
    parser.add_argument("--uvloop", action="store_true", help="install uvloop's event loop")
    args: Any = parser.parse_args()
    if args.uvloop:
        import uvloop

        uvloop.install()
        # ModelServer.start asks for the current loop before its asyncio.run makes a new one.
        asyncio.set_event_loop(asyncio.new_event_loop())
    ModelServer().start([Identity(args.model_name)])


if __name__ == "__main__":
    main()
