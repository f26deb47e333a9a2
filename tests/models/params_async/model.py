import json
from typing import Any

import numpy as np

from rosettaserve import Model


class ParamsEcho(Model):
    async def predict(
        self, inputs: dict[str, np.ndarray], parameters: dict[str, Any]
    ) -> dict[str, np.ndarray]:
        if parameters.get("fail") == "value":
            raise ValueError("parameter 'fail' asked for a ValueError")
        if parameters.get("fail") == "crash":
            raise RuntimeError("parameter 'fail' asked for a crash")
        params = json.dumps(parameters, sort_keys=True).encode()
        return {"OUTPUT0": inputs["INPUT0"] + 1, "PARAMS": np.array([params], dtype=object)}
