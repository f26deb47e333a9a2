"""What lets one ``model.py`` serve both rosettaserve and Triton's Python backend.

Each model of ``repository/`` is written once as a rosettaserve model (``class X(Model)`` with
``load`` and ``predict(inputs) -> outputs``, arrays by name). Its ``model.py`` also says
``class TritonPythonModel(OnTriton, X)``: Triton's Python backend looks for that class, and
``OnTriton`` gives it the backend's ``initialize`` and ``execute`` around the same ``load`` and
``predict``, and ``infer`` (a call to another model) through Triton's own
``pb_utils.InferenceRequest(...).exec()``.

Both servers import this module: rosettaserve finds it on its ``PYTHONPATH``, Triton's Python
backend (whose interpreter ignores ``PYTHONPATH``) in its backend folder (``servers.backends``).
rosettaserve is not installed where Triton's Python backend runs (``.venv-triton``), so there
``Model`` is a plain stand-in; ``triton_python_backend_utils`` exists only inside Triton, so it is
imported only by the methods Triton calls.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

try:
    from rosettaserve import Model
except ImportError:  # inside Triton's Python backend

    class Model:  # type: ignore[no-redef]
        """Stands in for rosettaserve's base class where rosettaserve is not installed."""

        config: dict[str, Any]

        def load(self) -> None:
            """What a model loads (the subclass's)."""


Arrays = dict[str, np.ndarray]


class CalleeError(Exception):
    """A called model's error (a ``pb_utils.TritonError``), answered by the caller as it is."""

    def __init__(self, error: Any) -> None:
        super().__init__(error.message())
        self.error = error


class OnTriton:
    """Triton's Python backend side of a model written as a rosettaserve ``Model``."""

    config: dict[str, Any]
    if TYPE_CHECKING:  # the model's own, from the class after this one (not overridden here)

        def load(self) -> None: ...

        def predict(self, inputs: Arrays) -> Arrays: ...

    def initialize(self, args: dict[str, str]) -> None:
        self.config = {"parameters": json.loads(args["model_config"]).get("parameters", {})}
        self.load()

    def execute(self, requests: list[Any]) -> list[Any]:
        import triton_python_backend_utils as pb_utils

        responses = []
        for request in requests:
            inputs = {tensor.name(): tensor.as_numpy() for tensor in request.inputs()}
            try:
                outputs = self.predict(inputs)
            except CalleeError as exc:  # the callee's status and message, as they are
                responses.append(pb_utils.InferenceResponse(error=exc.error))
                continue
            except ValueError as exc:  # bad input: rosettaserve's 400, Triton's INVALID_ARG
                error = pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            tensors = [pb_utils.Tensor(name, np.asarray(v)) for name, v in outputs.items()]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses

    def infer(
        self, model: str, inputs: Arrays, version: str | None = None, *, outputs: list[str]
    ) -> Arrays:
        """rosettaserve's ``Model.infer`` done with Triton's BLS: the callee's error raises."""
        import triton_python_backend_utils as pb_utils

        request = pb_utils.InferenceRequest(
            model_name=model,
            model_version=int(version) if version else -1,
            inputs=[pb_utils.Tensor(name, value) for name, value in inputs.items()],
            requested_output_names=outputs,
        )
        response = request.exec()
        if response.has_error():
            raise CalleeError(response.error())
        return {tensor.name(): tensor.as_numpy() for tensor in response.output_tensors()}
