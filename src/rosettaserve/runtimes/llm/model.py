"""The ``llm`` runtime: a transformers causal LM as ``save_pretrained`` writes it, behind an engine.

The LLM API families reach it as a ``TextGenerator``; the Open Inference Protocol reaches it as a
model with input ``text_input`` (BYTES) and output ``text_output`` (BYTES), generation options in
the request's parameters.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import numpy as np

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import (
    ChatTemplate,
    DeltaStream,
    Fields,
    GenerateRequest,
    GeneratorInfo,
    SamplingParams,
    collect,
)
from rosettaserve.core.generation_plane import tokenize_long_prompt
from rosettaserve.core.model import Arrays, Model
from rosettaserve.core.pd_engine import PdEngine
from rosettaserve.core.sampling_fields import PENALTIES, Field, SamplingTable, read_sampling
from rosettaserve.core.structured_output import OutputConstraint
from rosettaserve.core.types import TensorSpec
from rosettaserve.repository.config import ConfigError

DTYPES = ("float32", "float16", "bfloat16", "float64")
INPUT, OUTPUT = "text_input", "text_output"
OIP_DEFAULT_MAX_TOKENS = 64
OIP_MAX_STOP = 16


class LlmModel(Model):
    platform = "llm"

    def load(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded at run time
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from rosettaserve.runtimes.llm.engine import Engine

        params = Fields(self.config.get("parameters") or {}, "parameters")
        folder = Path(params.string("path") or self.path)
        if not (folder / "config.json").is_file():
            raise ConfigError(f"{folder} holds no transformers model (config.json is missing)")
        threads = params.integer("threads", None, 1, 1024)
        if threads:
            torch.set_num_threads(threads)
        device = torch.device(params.string("device") or "cpu")
        dtype = params.string("dtype") or "float32"
        if dtype not in DTYPES:
            raise ConfigError(f"parameters.dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
        tokenizer = _auto(AutoTokenizer).from_pretrained(folder, local_files_only=True)
        model = _auto(AutoModelForCausalLM).from_pretrained(folder, local_files_only=True)
        model = model.to(device=device, dtype=getattr(torch, dtype)).eval()
        self.tokenizer = tokenizer
        self.engine = Engine(model, tokenizer, engine_config(self.name, params, model), device)
        self.engine.start()
        self.inputs = [TensorSpec(INPUT, "BYTES", (-1,))]
        self.outputs = [TensorSpec(OUTPUT, "BYTES", (-1,))]

    def unload(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.stop()

    # -- TextGenerator ---------------------------------------------------------------------------

    @property
    def info(self) -> GeneratorInfo:
        return self.engine.info

    def generate(self, request: GenerateRequest) -> DeltaStream:
        return self.engine.generate(request)

    def constraint_ready(self, constraint: OutputConstraint) -> bool:
        return self.engine.grammars.ready(constraint)

    def compile_constraint(self, constraint: OutputConstraint) -> None:
        """Compiled and cached (runtimes/llm/grammar.py); InvalidInput if it cannot be."""
        self.engine.grammars.compiled(constraint)

    def pd_engine(self) -> PdEngine | None:
        """The engine as prefill/decode disaggregation reaches it (core/pd_engine.py)."""
        return self.engine

    def chat_prompt(self, messages: list[dict[str, Any]], chat: ChatTemplate | None = None) -> str:
        """The conversation as the model's chat template (or the request's, which transformers
        renders in Jinja's immutable sandbox) writes it, with the request's variables."""
        chat = chat or ChatTemplate()
        if not chat.template and not getattr(self.tokenizer, "chat_template", None):
            raise InvalidInput(f"model '{self.name}' has no chat template; use completions")
        tools = [dict(t) for t in chat.tools] if chat.tools else None
        try:
            text = self.tokenizer.apply_chat_template(
                messages, tools=tools, tokenize=False, chat_template=chat.template, **chat.variables
            )
        except Exception as exc:  # the template itself rejects the conversation
            raise InvalidInput(f"the chat template rejected the messages: {exc}") from exc
        return str(text)

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        return self.engine.tokenize(text, special)

    def decode(self, token_ids: list[int]) -> str:
        return str(self.tokenizer.decode(token_ids, skip_special_tokens=True))

    # -- Open Inference Protocol -----------------------------------------------------------------

    async def predict(self, inputs: Arrays, parameters: dict[str, Any] | None = None) -> Arrays:
        prompts = inputs[INPUT]
        sampling = oip_sampling(Fields(parameters or {}, "parameters"))
        streams: list[DeltaStream] = []
        try:
            for prompt in prompts.reshape(-1):
                text = prompt.decode("utf-8") if isinstance(prompt, bytes) else str(prompt)
                request = GenerateRequest(prompt=text, sampling=sampling)
                await tokenize_long_prompt(self, request)  # (off the event loop when long)
                streams.append(self.generate(request))
            results = await asyncio.gather(*(collect(s) for s in streams))
        finally:
            for stream in streams:
                stream.cancel()
        texts = [r[0].text.encode("utf-8") for r in results]
        return {OUTPUT: np.array(texts, dtype=object).reshape(prompts.shape)}


def _auto(cls: Any) -> Any:
    return cls  # transformers' Auto classes are loosely typed


def engine_config(name: str, params: Fields, model: Any) -> Any:
    from rosettaserve.runtimes.llm.engine import EngineConfig

    context = getattr(model.config, "max_position_embeddings", None) or 2048
    return EngineConfig(
        model_id=name,
        max_model_len=params.integer("max_model_len", int(context), 2) or int(context),
        max_num_seqs=params.integer("max_num_seqs", 32, 1, 4096) or 32,
        max_waiting=params.integer("max_waiting", 64, 0) or 0,
        max_n=params.integer("max_n", 8, 1, 128) or 8,
        kv_budget_tokens=params.integer("kv_budget_tokens", 0, 0) or 0,
        prefill_chunk_tokens=params.integer("prefill_chunk_tokens", 96, 16, 1 << 20) or 96,
        prefix_cache_tokens=params.integer("prefix_cache_tokens", 4096, 0, 1 << 30) or 0,
        prefix_block_tokens=params.integer("prefix_block_tokens", 16, 1, 4096) or 16,
        options=dict(params.doc),
    )


# Generation options in an OIP request's parameters: greedy unless a temperature is set.
OIP_SAMPLING = SamplingTable(
    fields=(
        Field("max_new_tokens", ("max_tokens", "max_new_tokens"), "int", 1),
        Field("temperature", ("temperature",), "number", 0.0, 100.0),
        Field("top_p", ("top_p",), "number", 0.0, 1.0, lo_open=True),
        Field("top_k", ("top_k",), "int", 0),
        *PENALTIES,
        Field("stop", ("stop",), "strings"),
    ),
    max_tokens=OIP_DEFAULT_MAX_TOKENS,
    default_temperature=0.0,
)


def oip_sampling(p: Fields) -> SamplingParams:
    return read_sampling(p, OIP_SAMPLING, OIP_MAX_STOP)


__all__ = ["LlmModel"]
