"""Structured output on the built-in engine: constraints compiled by xgrammar, one matcher per
sequence, one token mask per step.

Why xgrammar (bench/grammar_engines.py, bench/RESULTS.md "Grammar engines"): its masks for a
batch are the cheapest of the three engines measured, 10-28x cheaper than llguidance's, where
outlines-core, as fast, compiles a schema through a regex over the whole vocabulary and has no
context-free grammar [cost: grammar-engine]; and it takes every form the families send as it
is (JSON schema, any JSON object, regex, GBNF; a choice is a GBNF alternative).

- ``Grammars`` (one per engine, so per tokenizer): compiles an ``OutputConstraint`` (on the
  request-work threads, before the request is queued: core/structured_output.py), keeps the
  compiled grammars in a bounded LRU keyed by the constraint, and makes matchers;
- ``Matcher``: one sequence's place in its grammar; tokens chosen before (a resumed or
  preempted sequence) are replayed into a fresh one;
- ``Grammars.mask``: the constrained rows' masks filled in one batch call and applied to a copy
  of the step's logits (disallowed tokens -inf) before penalties, temperature and the draw;
  unconstrained rows are not touched. The stop tokens are allowed only where the grammar can
  end, and are all it allows once it has ended.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Any

import numpy as np
import orjson
import torch

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.structured_output import ConstraintKind, OutputConstraint
from rosettaserve.runtimes.llm.sampling import TokenState, choose

CACHE_ENTRIES = 256  # compiled grammars kept per engine (the least recently used go first)


class Matcher:
    """One sequence's matcher: ``accept`` each chosen token; ``ended`` once a stop token was
    taken (the output is complete)."""

    __slots__ = ("_m",)

    def __init__(self, m: Any) -> None:
        self._m = m

    def accept(self, token: int) -> bool:
        return bool(self._m.accept_token(token))

    @property
    def ended(self) -> bool:
        return bool(self._m.is_terminated())

    @property
    def complete(self) -> bool:
        """What was accepted matches the whole grammar (a stop token may come)."""
        return bool(self._m.is_completed())


class Grammars:
    def __init__(self, tokenizer: Any, vocab: int, stop_ids: set[int], max_rows: int) -> None:
        self._tokenizer = tokenizer
        self.vocab = vocab
        self._stop_ids = sorted(stop_ids)
        self._max_rows = max_rows
        self._lock = threading.Lock()  # the cache and the compiler (request-work threads)
        self._cache: OrderedDict[OutputConstraint, Any] = OrderedDict()
        self._compiler: Any = None  # made on first use: xgrammar loads only when asked
        self._batch: Any = None
        self._bitmask: torch.Tensor | None = None

    # -- compiling (any thread) -----------------------------------------------------------------

    def ready(self, constraint: OutputConstraint) -> bool:
        """Compiled already (and now the most recently used)."""
        with self._lock:
            if constraint not in self._cache:
                return False
            self._cache.move_to_end(constraint)
            return True

    def compiled(self, constraint: OutputConstraint) -> Any:
        """The compiled grammar of ``constraint`` (compiled now unless cached)."""
        with self._lock:
            found = self._cache.get(constraint)
            if found is not None:
                self._cache.move_to_end(constraint)
                return found
        grammar = self._compile(constraint)
        with self._lock:
            self._cache[constraint] = grammar
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return grammar

    def _compile(self, c: OutputConstraint) -> Any:
        compiler = self._xgrammar_compiler()
        try:
            if c.kind is ConstraintKind.JSON_SCHEMA:
                return compiler.compile_grammar(json_grammar(c.spec))
            if c.kind is ConstraintKind.JSON_OBJECT:
                return compiler.compile_grammar(json_grammar('{"type": "object"}'))
            if c.kind is ConstraintKind.REGEX:
                return compiler.compile_regex(c.spec)
            if c.kind is ConstraintKind.CHOICE:
                return compiler.compile_grammar(choice_gbnf(orjson.loads(c.spec)))
            return compiler.compile_grammar(c.spec)
        except Exception as exc:  # xgrammar's own errors (RuntimeError, ValueError, ...)
            raise InvalidInput(cannot_compile(c, exc)) from None

    def _xgrammar_compiler(self) -> Any:
        with self._lock:
            if self._compiler is None:
                import xgrammar as xgr

                info = xgr.TokenizerInfo.from_huggingface(
                    self._tokenizer, vocab_size=self.vocab, stop_token_ids=self._stop_ids
                )
                # our own cache keeps the compiled grammars; one thread per compile
                self._compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
            return self._compiler

    def matcher(self, constraint: OutputConstraint) -> Matcher:
        import xgrammar as xgr

        return Matcher(xgr.GrammarMatcher(self.compiled(constraint)))

    # -- masking (the engine thread) ------------------------------------------------------------

    def choose(
        self, logits: torch.Tensor, states: list[TokenState], matchers: list[Matcher | None]
    ) -> tuple[list[int], dict[int, Exception], torch.Tensor]:
        """sampling.choose over the logits the grammars allow (the constrained rows masked),
        each chosen token accepted by its row's matcher; a row whose mask or matcher fails
        fails alone, as a row whose sampling fails does. Also the logits chosen from."""
        rows = [i for i, m in enumerate(matchers) if m is not None]
        if not rows:
            return (*choose(logits, states), logits)
        live = [m for m in matchers if m is not None]
        failed: dict[int, Exception] = {}
        try:
            masked = self.mask(logits, rows, live)
        except Exception as exc:  # the constrained rows fail; the others go on
            masked, failed = logits, dict.fromkeys(rows, exc)
        tokens, more = choose(masked, states)
        failed.update(more)
        for i in rows:
            m = matchers[i]
            if i not in failed and m is not None and not m.accept(tokens[i]):
                failed[i] = ValueError(f"the grammar refused token {tokens[i]}")
        return tokens, failed, masked

    def mask(self, logits: torch.Tensor, rows: list[int], matchers: list[Matcher]) -> torch.Tensor:
        """A copy of ``logits`` [B, V] whose ``rows`` have their disallowed tokens at -inf."""
        return masked(logits, rows, self._fill(matchers))

    def _fill(self, matchers: list[Matcher]) -> torch.Tensor:
        import xgrammar as xgr

        if self._batch is None:
            self._batch = xgr.BatchGrammarMatcher(max_threads=1)
            words = (self.vocab + 31) // 32
            self._bitmask = torch.zeros((self._max_rows, words), dtype=torch.int32)
        assert self._bitmask is not None
        bitmask = self._bitmask[: len(matchers)]
        self._batch.batch_fill_next_token_bitmask([m._m for m in matchers], bitmask)
        return bitmask


def masked(logits: torch.Tensor, rows: list[int], bitmask: torch.Tensor) -> torch.Tensor:
    """A copy of ``logits`` whose ``rows`` have -inf where ``bitmask`` (a row each, 32 tokens
    an int32, xgrammar's layout) has a 0 bit. Unpacked by numpy and applied by one
    ``masked_fill_``, faster than xgrammar's own CPU kernel [cost: grammar-mask-apply]."""
    allowed = np.unpackbits(bitmask.numpy().view(np.uint8), axis=1, bitorder="little")
    refused = torch.from_numpy(allowed[:, : logits.shape[-1]].view(np.bool_)).logical_not()
    out = logits.clone()
    if len(rows) == logits.shape[0]:
        return out.masked_fill_(refused, float("-inf"))
    index = torch.tensor(rows)
    out[index] = out[index].masked_fill_(refused, float("-inf"))
    return out


# xgrammar 0.2.8 writes the characters of a string with minLength or maxLength as this class,
# which lets control characters through (JSON allows them only escaped); its plain strings use
# the second one, which is what JSON allows
LENGTH_CHARS = r"[^\"\\\r\n]"
JSON_CHARS = r"[^\0-\x1f\"\\\r\n]"


def json_grammar(schema: str) -> Any:
    """The schema's grammar, written without whitespace between tokens (a small model's
    endless whitespace cannot keep it from ending), and its strings JSON's strings."""
    import xgrammar as xgr

    text = str(xgr.Grammar.from_json_schema(schema, any_whitespace=False))
    return xgr.Grammar.from_ebnf(text.replace(LENGTH_CHARS, JSON_CHARS))


def choice_gbnf(choices: list[str]) -> str:
    """A grammar whose sentences are exactly ``choices`` (JSON string literals are GBNF's)."""
    return "root ::= " + " | ".join(orjson.dumps(c).decode() for c in choices)


def cannot_compile(c: OutputConstraint, exc: Exception) -> str:
    what = {
        ConstraintKind.JSON_SCHEMA: "the JSON schema",
        ConstraintKind.JSON_OBJECT: "the JSON object grammar",
        ConstraintKind.REGEX: "the regular expression",
        ConstraintKind.CHOICE: "the choices",
        ConstraintKind.GRAMMAR: "the grammar (GBNF)",
    }[c.kind]
    # xgrammar's messages begin with the time and its source file: "[00:34:18] x.cc:83: "
    reason = re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", " ".join(str(exc).split()))
    reason = reason[:500] or type(exc).__name__
    return f"{what} cannot be compiled: {reason}"
