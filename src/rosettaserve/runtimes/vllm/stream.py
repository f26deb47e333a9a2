"""One request on vLLM's engine: the plane's sampling fields as vLLM's ``SamplingParams``, and
vLLM's ``RequestOutput`` deltas as the plane's ``GenerateDelta`` stream.

vLLM's objects are loosely typed from here (``Any``): the runtime is type-checked where vLLM is
not installed.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson

from rosettaserve.core.errors import InvalidInput, ModelError, ServingError
from rosettaserve.core.generate import (
    FinishReason,
    GenerateDelta,
    PromptLogprobs,
    RankedLogprob,
    SamplingParams,
    TokenLogprob,
    TopLogprob,
    Usage,
)
from rosettaserve.core.share import DEFAULT, Share
from rosettaserve.core.structured_output import ConstraintKind, OutputConstraint

log = logging.getLogger("rosettaserve.vllm")


def vllm_sampling(p: SamplingParams, n: int, max_tokens: int) -> Any:
    """vLLM's ``SamplingParams`` for ``p``, its outputs as deltas (``RequestOutputKind.DELTA``).

    ``p`` comes from the families' one reader (core/sampling_fields.py), whose values are
    already safe to sample with; what this vLLM's own checks refuse besides (its
    ``VLLMValidationError`` is a ValueError: a version's narrower range) is the client's 400.
    """
    from vllm.sampling_params import RequestOutputKind
    from vllm.sampling_params import SamplingParams as VllmSamplingParams

    try:
        return VllmSamplingParams(
            n=n,
            max_tokens=max_tokens,
            temperature=p.temperature,
            top_p=p.top_p,
            top_k=p.top_k,
            seed=p.seed,
            repetition_penalty=p.repetition_penalty,
            presence_penalty=p.presence_penalty,
            frequency_penalty=p.frequency_penalty,
            stop=list(p.stop),
            stop_token_ids=list(p.stop_token_ids),
            include_stop_str_in_output=p.include_stop_str_in_output,
            ignore_eos=p.ignore_eos,
            logprobs=p.top_logprobs if p.logprobs else None,
            prompt_logprobs=p.prompt_logprobs,
            skip_special_tokens=p.skip_special_tokens,
            output_kind=RequestOutputKind.DELTA,
            structured_outputs=structured_outputs(p.constraint),
        )
    except ValueError as exc:
        raise InvalidInput(f"vLLM refused the sampling parameters: {str(exc)[:500]}") from None


def structured_outputs(c: OutputConstraint | None) -> Any:
    """vLLM's own structured outputs for ``c`` (its backend compiles and checks it: a
    constraint it cannot compile fails the request with its message, a 400)."""
    if c is None:
        return None
    from vllm.sampling_params import StructuredOutputsParams

    field, value = VLLM_FIELDS[c.kind]
    spec: Any = value if value is not None else c.spec
    if c.kind is ConstraintKind.CHOICE:
        spec = orjson.loads(c.spec)
    return StructuredOutputsParams(**{field: spec})


def check_constraint(llm: Any, c: OutputConstraint) -> None:
    """vLLM's own checks of ``c`` (those its processor runs when a request is added: its
    structured-output backend converts the grammar); InvalidInput with vLLM's message."""
    from vllm.sampling_params import SamplingParams as VllmSamplingParams

    processor = llm.input_processor
    try:
        params = VllmSamplingParams(max_tokens=1, structured_outputs=structured_outputs(c))
        params.verify(
            processor.model_config,
            processor.speculative_config,
            processor.structured_outputs_config,
            processor.tokenizer,
        )
    except Exception as exc:  # vLLM's client errors are the caller's (serving_error)
        if not isinstance(serving_error(exc), InvalidInput):
            raise
        raise InvalidInput(f"vLLM cannot use the constraint: {str(exc)[:500]}") from None


# each kind's StructuredOutputsParams field, and its value when not the spec itself
VLLM_FIELDS: dict[ConstraintKind, tuple[str, Any]] = {
    ConstraintKind.JSON_SCHEMA: ("json", None),
    ConstraintKind.JSON_OBJECT: ("json_object", True),
    ConstraintKind.REGEX: ("regex", None),
    ConstraintKind.CHOICE: ("choice", None),
    ConstraintKind.GRAMMAR: ("grammar", None),
}


def finish(reason: str | None, stop_reason: int | str | None) -> FinishReason | None:
    """vLLM's finish reason: "stop" is a stop string or token (``stop_reason``) or else EOS."""
    if reason is None:
        return None
    if reason == "length":
        return FinishReason.LENGTH
    if reason == "stop":
        return FinishReason.EOS if stop_reason is None else FinishReason.STOP
    raise ModelError(f"vLLM ended the sequence: {reason}")


class VllmStream:
    """The deltas of one request (all ``n`` sequences); ``cancel`` aborts it in vLLM.

    Its ``n`` sequences are counted in the engine's capacity (as ``share``'s) until it ends:
    vLLM finished it, it failed, or it was cancelled (the plane cancels every stream it is done
    with, read or not), whichever comes first."""

    def __init__(
        self,
        engine: Any,
        outputs: AsyncIterator[Any],
        request_id: str,
        prompt_tokens: int,
        sampling: SamplingParams,
        *,
        n: int,
        prior: int = 0,
        share: Share = DEFAULT,
    ) -> None:
        self.engine = engine  # a VllmEngine (engine.py): its AsyncLLM, counters and info
        self.outputs = outputs
        self.request_id = request_id
        self.prompt_tokens = prompt_tokens
        self.special_ids: frozenset[int] = engine.info.special_ids
        self.seed = sampling.seed
        self.top_logprobs = sampling.top_logprobs
        self.counts: dict[int, int] = {0: prior} if prior else {}  # each sequence's tokens
        self.n = n
        self.share = share
        self.open = n  # sequences whose last delta has not come
        self.pending: deque[GenerateDelta] = deque()
        self.prompt_logprobs: PromptLogprobs | None = None  # until a delta carries them
        self.ended = False
        self.aborting: asyncio.Task[None] | None = None

    def __aiter__(self) -> VllmStream:
        return self

    async def __anext__(self) -> GenerateDelta:
        while not self.pending:
            if self.ended:
                raise StopAsyncIteration
            try:
                self.pending.extend(self.deltas(await self.outputs.__anext__()))
            except StopAsyncIteration:
                self.end()
                raise
            except ServingError:
                self.end()
                raise
            except Exception as exc:
                self.end()
                raise serving_error(exc) from exc
            if self.open <= 0:  # vLLM's generator ends here (no abort when it is collected)
                self.end()
                async for _ in self.outputs:
                    pass
        return self.pending.popleft()

    def deltas(self, out: Any) -> Iterator[GenerateDelta]:
        if getattr(out, "prompt_logprobs", None):  # the first output of a request that asked
            self.prompt_logprobs = prompt_logprobs(out.prompt_logprobs)
        for seq in out.outputs:
            ids = [int(t) for t in seq.token_ids]
            if not ids and seq.finish_reason is None and not seq.text:
                continue
            count = self.counts[seq.index] = self.counts.get(seq.index, 0) + len(ids)
            self.engine.stats.tokens += len(ids)
            delta = GenerateDelta(
                index=seq.index,
                text=seq.text,
                token_ids=ids,
                special=[t in self.special_ids for t in ids],
                logprobs=token_logprobs(ids, seq.logprobs, self.top_logprobs)
                if seq.logprobs
                else None,
            )
            delta.prompt_logprobs, self.prompt_logprobs = self.prompt_logprobs, None
            reason = finish(seq.finish_reason, seq.stop_reason)
            if reason is not None:
                delta.finish_reason, delta.stop_reason = reason, seq.stop_reason
                delta.usage, delta.seed = Usage(self.prompt_tokens, count), self.seed
                self.open -= 1
            yield delta

    def cancel(self) -> None:
        """Abort the request in vLLM (its scheduler frees the sequence and its KV blocks)."""
        if self.ended:
            return
        self.end()
        self.pending.clear()
        self.engine.stats.cancelled += 1
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a stream dropped at exit): vLLM aborts it when collected
            return
        self.aborting = loop.create_task(self._abort())

    def end(self) -> None:
        """The request left vLLM (or never reaches it): its sequences leave the capacity."""
        if not self.ended:
            self.ended = True
            self.engine.capacity.release(self.share, self.n)

    async def _abort(self) -> None:
        try:
            await self.engine.llm.abort(self.request_id)
        except Exception:
            log.exception("vLLM could not abort request %s", self.request_id)


def serving_error(exc: Exception) -> ServingError:
    """vLLM's client errors (its ``VLLMClientError``s, ``ValueError``) are the caller's."""
    client = any(c.__name__ == "VLLMClientError" for c in type(exc).__mro__)
    if client or isinstance(exc, ValueError):
        return InvalidInput(str(exc))
    return ModelError(f"vLLM: {type(exc).__name__}: {exc}")


def token_logprobs(ids: list[int], positions: Any, k: int) -> list[TokenLogprob]:
    """vLLM's per-position ``{token id: Logprob}`` (its top ``k`` and the chosen token) as the
    plane's token log-probabilities."""
    out = []
    for token, position in zip(ids, positions, strict=False):
        found = position or {}
        chosen = found.get(token)
        ranked = sorted(found.items(), key=lambda item: item[1].rank or 0)[:k]
        top = tuple(TopLogprob(t, lp.decoded_token or "", float(lp.logprob)) for t, lp in ranked)
        value = float(chosen.logprob) if chosen is not None else float("-inf")
        piece = (chosen.decoded_token or "") if chosen is not None else ""
        out.append(TokenLogprob(token, piece, value, top))
    return out


def prompt_logprobs(places: Any) -> PromptLogprobs:
    """vLLM's ``prompt_logprobs`` (per prompt token ``{token id: Logprob}``, the token and its
    top k; None first) as the plane's."""
    return [
        None
        if place is None
        else tuple(
            RankedLogprob(int(t), lp.decoded_token or "", float(lp.logprob), int(lp.rank or 0))
            for t, lp in place.items()
        )
        for place in places
    ]
