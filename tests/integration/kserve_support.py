"""Shared by the tests that drive the server with kserve's clients (REST and gRPC): the same
InferInput and InferResponse types serve both."""

from __future__ import annotations

import numpy as np
from kserve import InferInput, InferResponse


def kinput(name: str, array: np.ndarray, datatype: str, binary: bool) -> InferInput:
    inp = InferInput(name, list(array.shape), datatype)
    inp.set_data_from_numpy(array, binary_data=binary)
    return inp


def value(response: InferResponse, name: str) -> np.ndarray:
    out = response.get_output_by_name(name)
    assert out is not None, f"output {name} missing"
    array: np.ndarray = out.as_numpy()
    return array
