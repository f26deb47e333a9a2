"""``runtime: vllm``: a transformers model folder served by vLLM's engine (its V1 ``AsyncLLM``).

The model is the ``llm`` runtime's (runtimes/llm/model.py: the LLM API families reach it as a
``TextGenerator``, the Open Inference Protocol as ``text_input`` -> ``text_output``) with vLLM's
engine in place of the built-in one. vLLM starts its engine core in a process of its own.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from rosettaserve.core.generate import Fields, GeneratorInfo
from rosettaserve.core.structured_output import OutputConstraint
from rosettaserve.core.types import TensorSpec
from rosettaserve.repository.config import ConfigError
from rosettaserve.runtimes.llm.model import INPUT, OUTPUT, LlmModel
from rosettaserve.runtimes.llm.prompt_bound import max_prompt_chars
from rosettaserve.runtimes.vllm.args import (
    MAX_N,
    MAX_WAITING,
    engine_kwargs,
    model_folder,
)
from rosettaserve.runtimes.vllm.engine import VllmConfig, VllmEngine
from rosettaserve.runtimes.vllm.sleep import VllmSleep, sleep_mode_available
from rosettaserve.runtimes.vllm.stream import check_constraint

CHECKED_CONSTRAINTS = 256


class VllmModel(VllmSleep, LlmModel):
    platform = "vllm"
    _checked: dict[OutputConstraint, None]

    def load(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded at run time
        os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
        quiet_vllm_logging()
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        params = Fields(self.config.get("parameters") or {}, "parameters")
        folder = model_folder(params, self.path)
        kwargs = engine_kwargs(self.name, params, folder, sleep_mode_available())
        try:
            args = AsyncEngineArgs(**kwargs)
        except TypeError as exc:  # an engine argument vLLM does not know
            raise ConfigError(f"parameters.engine_args: {exc}") from None
        self.built_to_sleep(kwargs)
        llm: Any = AsyncLLM.from_engine_args(args)
        self.tokenizer = llm.get_tokenizer()
        # the built-in engine's surface, which LlmModel and the metrics use (engine.py)
        engine: Any = vllm_engine(self.name, params, llm, self.tokenizer)
        self.engine = engine
        self._checked = {}  # constraints vLLM's checks passed (the oldest go first)
        self.inputs = [TensorSpec(INPUT, "BYTES", (-1,))]
        self.outputs = [TensorSpec(OUTPUT, "BYTES", (-1,))]

    def vllm_llm(self) -> Any:
        engine: Any = self.engine  # a VllmEngine (engine.py)
        return engine.llm

    # vLLM compiles a constraint itself; its checks run here first (cached), so what it cannot
    # compile is a 400 before a stream begins, as on the built-in engine

    def constraint_ready(self, constraint: OutputConstraint) -> bool:
        return constraint in self._checked

    def compile_constraint(self, constraint: OutputConstraint) -> None:
        engine: Any = self.engine  # a VllmEngine (engine.py)
        check_constraint(engine.llm, constraint)
        self._checked[constraint] = None
        while len(self._checked) > CHECKED_CONSTRAINTS:
            del self._checked[next(iter(self._checked))]


def quiet_vllm_logging() -> None:
    """vLLM's lines go through the server's log configuration, not a handler of its own (whose
    format needs the record's process id, which the server's logging leaves out)."""
    if os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0") == "0":
        logger = logging.getLogger("vllm")
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.propagate = True


def vllm_engine(name: str, params: Fields, llm: Any, tokenizer: Any) -> VllmEngine:
    """The engine's limits as vLLM settled them (its defaults where model.yaml is silent)."""
    vllm_config = llm.vllm_config
    model_config = vllm_config.model_config
    max_num_seqs = int(vllm_config.scheduler_config.max_num_seqs)
    config = VllmConfig(
        max_model_len=int(model_config.max_model_len),
        max_num_seqs=max_num_seqs,
        max_waiting=params.integer("max_waiting", MAX_WAITING, 0) or 0,
        by_priority=vllm_config.scheduler_config.policy == "priority",
    )
    info = GeneratorInfo(
        model_id=name,
        max_model_len=config.max_model_len,
        max_n=min(params.integer("max_n", MAX_N, 1, 128) or MAX_N, max_num_seqs),
        max_num_seqs=max_num_seqs,
        max_waiting=config.max_waiting,
        max_stop_sequences=8,
        dtype=str(model_config.dtype).removeprefix("torch."),
        device=str(vllm_config.device_config.device_type),
        special_ids=frozenset(getattr(tokenizer, "all_special_ids", []) or []),
        created=int(time.time()),
        options=dict(params.doc),
        prompt_logprobs=True,  # vLLM computes them in its prefill
        max_prompt_chars=max_prompt_chars(tokenizer, config.max_model_len),
    )
    return VllmEngine(llm, tokenizer, info, config, int(model_config.get_vocab_size()))


__all__ = ["VllmModel"]
