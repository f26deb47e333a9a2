"""vLLM's ``AsyncLLM`` with the surface of the built-in engine (runtimes/llm/engine.py) that
``LlmModel``, the metrics and the status page use: ``info``, ``generate``, ``tokenize``,
``stop``, ``stats`` and ``config``.

Requests are checked here first (prompt length, the room left for output, ``n``, the engine's
capacity: the built-in engine's, shared between API keys) so that their errors read as the
built-in engine's; vLLM then does the scheduling (by the request's priority, core/share.py),
sampling, detokenisation and stop strings.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import (
    DeltaStream,
    GenerateDelta,
    GenerateRequest,
    GeneratorInfo,
    SamplingParams,
)
from rosettaserve.core.share import SHARE, Share
from rosettaserve.runtimes.llm.capacity import Capacity
from rosettaserve.runtimes.llm.detok import encoder
from rosettaserve.runtimes.llm.prompts import max_new_tokens, prompt_ids
from rosettaserve.runtimes.vllm.stream import VllmStream, vllm_sampling


@dataclass(frozen=True)
class VllmConfig:
    """What the metrics read of an engine's configuration (the names of runtimes/llm)."""

    max_model_len: int
    max_num_seqs: int
    max_waiting: int
    kv_budget_tokens: int = 0  # vLLM sizes its KV cache itself
    by_priority: bool = True  # vLLM's scheduling_policy is "priority" (args.py), not "fcfs"


class VllmStats:
    """The built-in engine's counters, as far as vLLM's front tells them."""

    def __init__(self, llm: Any, max_num_seqs: int) -> None:
        self.llm = llm
        self.max_num_seqs = max_num_seqs
        self.tokens = 0  # tokens generated (as handed to the plane)
        self.prefills = 0  # requests started
        self.cancelled = 0  # requests aborted because their client went away
        self.decode_steps = self.peak_batch = self.preempted = self.kv_tokens = 0

    @property
    def unfinished(self) -> int:
        """Sequences vLLM holds (running or waiting)."""
        return int(self.llm.get_num_unfinished_requests())

    @property
    def running(self) -> int:
        return min(self.unfinished, self.max_num_seqs)

    @property
    def waiting(self) -> int:
        return max(0, self.unfinished - self.max_num_seqs)


class VllmEngine:
    def __init__(
        self, llm: Any, tokenizer: Any, info: GeneratorInfo, config: VllmConfig, vocab: int
    ) -> None:
        self.llm = llm
        self.tokenizer = tokenizer
        self.encode = encoder(tokenizer)
        self.info = info
        self.config = config
        self.vocab = vocab
        self.stats = VllmStats(llm, config.max_num_seqs)
        # sequences submitted and not yet ended, by API key (the built-in engine's rule)
        self.capacity = Capacity(config.max_num_seqs + config.max_waiting)
        self.kv = None  # no KV cache hand-over: a decode instance recomputes it (``resume``)

    def stop(self) -> None:
        self.llm.shutdown()

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        return self.encode(text, special)

    def generate(self, request: GenerateRequest) -> VllmStream:
        """Check ``request`` and hand it to vLLM (it starts when the stream is first read)."""
        ids = self.prompt_ids(request)
        return self.submit(request, ids, self.max_new_tokens(request.sampling, len(ids)))

    def resume(
        self, request: GenerateRequest, prompt_ids: list[int], prior: list[int], emit_prior: bool
    ) -> DeltaStream:
        """``request`` (n = 1) going on after ``prior``, output tokens made elsewhere (prefill/
        decode disaggregation without a KV cache to hand over): vLLM prefills the prompt and
        them again. With ``emit_prior`` the ``prior`` tokens come first as one delta (their text,
        as state for the family's framer); the usage counts them as output. Greedy output is
        that of one run; a seeded sample draws anew from here."""
        ids = prompt_ids + prior
        if len(ids) >= self.config.max_model_len or not 0 <= min(ids) <= max(ids) < self.vocab:
            raise InvalidInput(f"{len(ids)} token ids do not fit this model or its window")
        left = self.max_new_tokens(request.sampling, len(prompt_ids)) - len(prior)
        if request.n != 1 or left < 1:
            raise InvalidInput("a resumed request has n = 1 and room for one more token")
        if prior and request.sampling.constraint is not None:  # vLLM's grammar would restart
            raise InvalidInput(
                "structured outputs are not supported when runtime vllm resumes a sequence "
                "(prefill/decode disaggregation): its grammar cannot start past the prior tokens"
            )
        stream = self.submit(request, ids, left, prompt_tokens=len(prompt_ids), prior=len(prior))
        if prior and emit_prior:
            text = self.tokenizer.decode(ids)[len(self.tokenizer.decode(prompt_ids)) :]
            stream.pending.append(GenerateDelta(0, text, list(prior), [False] * len(prior)))
        return stream

    def submit(
        self,
        request: GenerateRequest,
        ids: list[int],
        max_new: int,
        *,
        prompt_tokens: int | None = None,
        prior: int = 0,
    ) -> VllmStream:
        if not 1 <= request.n <= self.info.max_n:
            raise InvalidInput(f"n must be in [1, {self.info.max_n}], got {request.n}")
        share = SHARE.get()  # whose request and its priority (core/share.py)
        if share.priority and not self.config.by_priority:
            raise InvalidInput(
                f"priority {share.priority} needs vLLM's priority scheduling: this model's "
                "engine_args set scheduling_policy 'fcfs', which would ignore it; send "
                "priority 0 or leave scheduling_policy unset"
            )
        self.capacity.admit(share, request.n)  # Overloaded past it: nothing to give back
        try:  # from here the stream's end gives them back (stream.py: ``end``)
            return self._submit(
                request, ids, max_new, share, prompt_tokens=prompt_tokens, prior=prior
            )
        except BaseException:
            self.capacity.release(share, request.n)
            raise

    def _submit(
        self,
        request: GenerateRequest,
        ids: list[int],
        max_new: int,
        share: Share,
        *,
        prompt_tokens: int | None,
        prior: int,
    ) -> VllmStream:
        params = vllm_sampling(request.sampling, request.n, max_new)
        request_id = f"{request.request_id or 'gen'}-{uuid.uuid4().hex}"
        prompt = {"type": "token", "prompt_token_ids": ids}  # rendered: vLLM tokenizes nothing
        outputs = self.llm.generate(prompt, params, request_id, priority=share.priority)
        self.stats.prefills += 1
        counted = len(ids) if prompt_tokens is None else prompt_tokens
        return VllmStream(
            self,
            outputs,
            request_id,
            counted,
            request.sampling,
            n=request.n,
            prior=prior,
            share=share,
        )

    def prompt_ids(self, request: GenerateRequest) -> list[int]:
        return prompt_ids(request, self.vocab, self.info, self.tokenize)

    def max_new_tokens(self, params: SamplingParams, prompt_len: int) -> int:
        return max_new_tokens(params, prompt_len, self.config.max_model_len)
