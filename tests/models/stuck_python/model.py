"""Blocks on an event that never fires for as many seconds as a request's parameter "block" says
(at most BLOCK_S, so that a test run always ends), or exits its process mid-call when "exit" (a
status) is given; every answer carries the process id it ran in (on each row, batched)."""

import os
import threading
from typing import Any

import numpy as np

from rosettaserve import Model

BLOCK_S = 60.0


class Stuck(Model):
    def load(self) -> None:
        self.never = threading.Event()

    def predict(
        self, inputs: dict[str, np.ndarray], parameters: dict[str, Any]
    ) -> dict[str, np.ndarray]:
        if "exit" in parameters:  # the process dies in the middle of the call
            os._exit(int(parameters["exit"]))
        block = min(float(parameters.get("block", 0)), BLOCK_S)
        if block > 0:
            self.never.wait(block)
        rows = len(inputs["INPUT0"]) if self.max_batch_size > 0 else 1  # one a batch row
        return {"OUTPUT0": inputs["INPUT0"], "PID": np.full(rows, os.getpid(), dtype=np.int64)}
