"""What a chosen token becomes: the sequence's delta (its text, a stop string or token that ends
it, the finish reason, the logprobs and their tokens' text)."""

from __future__ import annotations

from collections.abc import Callable

from rosettaserve.core.generate import (
    FinishReason,
    GenerateDelta,
    TokenLogprob,
    TopLogprob,
    Usage,
)
from rosettaserve.runtimes.llm.sampling import Logprobs
from rosettaserve.runtimes.llm.state import Sequence


class Deltas:
    def __init__(
        self, eos_ids: set[int], special_ids: set[int], decode_all: Callable[[list[int]], str]
    ) -> None:
        self.eos_ids = eos_ids
        self.special_ids = special_ids
        self._decode_all = decode_all  # a token's text, special tokens included

    def accept(self, seq: Sequence, token: int, lp: Logprobs | None) -> GenerateDelta:
        """``token`` taken as ``seq``'s next: its delta, and whether it ends the sequence."""
        seq.output_ids.append(token)
        seq.last_token = token
        seq.tokens.record(token)
        finish, text = self._finish_by_token(seq, token), ""
        stop_reason: str | int | None = None
        if finish is not None:
            stop_reason = token if finish is FinishReason.STOP else None
        else:  # an ordinary token: its text, which may complete a stop string
            text, stop = seq.text.push(seq.detok.push(token))
            if stop is not None:
                finish, stop_reason = FinishReason.STOP, stop
            elif seq.grammar is not None and seq.grammar.ended:  # (it took a stop token)
                finish = FinishReason.STOP
            elif len(seq.output_ids) >= seq.max_new_tokens:
                finish = FinishReason.LENGTH
        if finish is not None and not isinstance(stop_reason, str):
            tail, stop = seq.text.push(seq.detok.flush())  # an unfinished character, held text
            text += tail + seq.text.flush()
            if stop is not None:
                finish, stop_reason = FinishReason.STOP, stop
        delta = GenerateDelta(
            index=seq.index,
            text=text,
            token_ids=[token],
            special=[token in self.special_ids],
            logprobs=[self._token_logprob(token, lp)] if lp is not None else None,
        )
        if finish is not None:
            seq.finished = True
            delta.finish_reason, delta.stop_reason, delta.seed = finish, stop_reason, seq.seed
            delta.usage = Usage(len(seq.prompt_ids), len(seq.output_ids))
        return delta

    def _finish_by_token(self, seq: Sequence, token: int) -> FinishReason | None:
        """A stop token id or the end-of-sequence token ends a sequence; its text is not output."""
        if token in seq.params.stop_token_ids:
            return FinishReason.STOP
        if token in self.eos_ids and not seq.params.ignore_eos:
            return FinishReason.EOS
        return None

    def _token_logprob(self, token: int, lp: Logprobs) -> TokenLogprob:
        top = tuple(TopLogprob(t, self._piece(t), v) for t, v in lp.top)
        return TokenLogprob(token, self._piece(token), lp.chosen, top)

    def _piece(self, token: int) -> str:
        return self._decode_all([token])
