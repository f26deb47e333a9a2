"""The ``vllm`` runtime: vLLM's engine (its V1 ``AsyncLLM``) behind the generation plane.

Installed by the ``vllm`` extra (``pip install 'rosettaserve[vllm]'``); vLLM is imported only
when a model of this runtime loads.
"""

from rosettaserve.runtimes.vllm.model import VllmModel
from rosettaserve.runtimes.vllm.pooling import create

__all__ = ["VllmModel", "create"]
