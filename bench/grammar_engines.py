"""The three grammar engines a built-in structured output could use, measured side by side:
xgrammar, llguidance and outlines-core.

    PYTHONPATH=src .venv/bin/python bench/grammar_engines.py [--steps 40] [--repeat 3]

For each engine and each tokenizer (the tiny example Llama's, 768 tokens, and a 32k byte-level
BPE trained here from this Python's standard library sources, fixed order: nothing is
downloaded; it is kept in build/bench_bpe32k.json):
- compile: the time to compile each form (three JSON schemas, a regex, a GBNF grammar), a
  fresh compiler each time (no cache), median of ``--repeat``; "-" where the engine has no
  such form;
- step: one decode step's work for 32 sequences: the token mask of every row computed (one
  thread, the engine's batch call where it has one), then applied to a copy of float32
  logits [32, V] as the server applies it (runtimes/llm/grammar.py ``masked``; the same for
  every engine: they share the bitmask layout) and as xgrammar's CPU kernel does; each row
  follows a valid document of the nested schema token by token, median over the steps.
The figures print as a Markdown table (bench/RESULTS.md, "Grammar engines").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rosettaserve.runtimes.llm.grammar import masked

ROOT = Path(__file__).resolve().parent.parent
BATCH = 32
SMALL = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
NESTED = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "status": {"enum": ["open", "closed", "pending"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
        "owner": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "admin": {"type": "boolean"}},
            "required": ["name", "admin"],
            "additionalProperties": False,
        },
        "score": {"type": "number"},
    },
    "required": ["id", "status", "tags", "owner", "score"],
    "additionalProperties": False,
}
NESTED_DOC = (
    '{"id": 1234, "status": "pending", "tags": ["alpha", "beta"], '
    '"owner": {"name": "Ada Lovelace", "admin": true}, "score": 3.25}'
)


def _tool(name: str, params: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"enum": [name]}, "parameters": params},
        "required": ["name", "parameters"],
    }


# the shape of vLLM's schema for tool_choice "required": an array of calls of the tools offered
TOOLS = {
    "type": "array",
    "minItems": 1,
    "items": {
        "anyOf": [
            _tool(
                "get_weather",
                {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string"},
                        "unit": {"enum": ["celsius", "fahrenheit"]},
                    },
                    "required": ["city"],
                },
            ),
            _tool(
                "search",
                {
                    "type": "object",
                    "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                    "required": ["query"],
                },
            ),
        ]
    },
}
REGEX = r"[a-z]{1,12}@[a-z]{1,12}\.(com|org|net)"
GBNF = 'root ::= item ("," item)*\nitem ::= "yes" | "no" | [0-9]+\n'
FORMS: dict[str, tuple[str, Any]] = {
    "schema small": ("json", SMALL),
    "schema nested": ("json", NESTED),
    "schema tool calls": ("json", TOOLS),
    "regex": ("regex", REGEX),
    "GBNF": ("gbnf", GBNF),
}


def tiny_llama() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(ROOT / "examples/models/tiny_llama")


def bpe32k() -> Any:
    """A 32k byte-level BPE trained on this Python's standard library sources (sorted)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    path = ROOT / "build/bench_bpe32k.json"
    if not path.exists():
        lib = Path(json.__file__).resolve().parent.parent
        files = sorted(str(p) for p in lib.glob("*.py"))
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=32000,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        tok.train(files, trainer)
        path.parent.mkdir(exist_ok=True)
        tok.save(str(path))
    return PreTrainedTokenizerFast(tokenizer_file=str(path), eos_token="<|endoftext|>")


class Xgrammar:
    name = "xgrammar"

    def __init__(self, hf: Any) -> None:
        import xgrammar as xgr

        self.xgr = xgr
        self.vocab = len(hf)
        self.info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=self.vocab)
        self.batch = xgr.BatchGrammarMatcher(max_threads=1)

    def compile(self, kind: str, spec: Any) -> Any:
        c = self.xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)
        if kind == "json":
            return c.compile_json_schema(json.dumps(spec))
        if kind == "regex":
            return c.compile_regex(spec)
        return c.compile_grammar(spec)

    def matchers(self, compiled: Any, n: int) -> list[Any]:
        return [self.xgr.GrammarMatcher(compiled) for _ in range(n)]

    def fill(self, matchers: list[Any], bitmask: torch.Tensor) -> None:
        self.batch.batch_fill_next_token_bitmask(matchers, bitmask)

    def accept(self, matcher: Any, token: int) -> bool:
        return bool(matcher.accept_token(token))


class Llguidance:
    name = "llguidance"

    def __init__(self, hf: Any) -> None:
        import llguidance
        import llguidance.hf

        self.ll = llguidance
        self.vocab = len(hf)
        self.tok = llguidance.hf.from_tokenizer(hf, self.vocab)
        self.executor = llguidance.LLExecutor(1)

    def compile(self, kind: str, spec: Any) -> Any:
        from llguidance.gbnf_to_lark import any_to_lark

        ll = self.ll
        if kind == "json":
            grammar = ll.LLMatcher.grammar_from_json_schema(json.dumps(spec))
        elif kind == "regex":
            grammar = ll.grammar_from("regex", spec)
        else:
            grammar = ll.grammar_from("lark", any_to_lark(spec))
        matcher = ll.LLMatcher(self.tok, grammar)  # compiles lazily: the first mask counts
        matcher.compute_bitmask()
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        return grammar

    def matchers(self, compiled: Any, n: int) -> list[Any]:
        return [self.ll.LLMatcher(self.tok, compiled) for _ in range(n)]

    def fill(self, matchers: list[Any], bitmask: torch.Tensor) -> None:
        import llguidance.torch

        pairs = [(m, i) for i, m in enumerate(matchers)]
        llguidance.torch.fill_next_token_bitmask_par(self.executor, pairs, bitmask)

    def accept(self, matcher: Any, token: int) -> bool:
        return bool(matcher.consume_token(token))


class OutlinesCore:
    name = "outlines-core"

    def __init__(self, hf: Any) -> None:
        import outlines_core
        from transformers.convert_slow_tokenizer import bytes_to_unicode

        self.oc = outlines_core
        self.vocab = len(hf)
        to_byte = {v: k for k, v in bytes_to_unicode().items()}
        tokens: dict[bytes, list[int]] = {}
        for token, i in hf.get_vocab().items():
            if token in hf.all_special_tokens:
                continue
            raw = bytes(to_byte[c] for c in token) if all(c in to_byte for c in token) else None
            tokens.setdefault(raw or token.encode(), []).append(i)
        self.vocabulary = outlines_core.Vocabulary(hf.eos_token_id, tokens)

    def compile(self, kind: str, spec: Any) -> Any:
        if kind == "gbnf":
            raise NotImplementedError("outlines-core has no context-free grammars")
        if kind == "json":
            spec = self.oc.json_schema.build_regex_from_schema(json.dumps(spec))
        return self.oc.Index(spec, self.vocabulary)

    def matchers(self, compiled: Any, n: int) -> list[Any]:
        return [self.oc.Guide(compiled) for _ in range(n)]

    def fill(self, matchers: list[Any], bitmask: torch.Tensor) -> None:
        for i, guide in enumerate(matchers):
            row = bitmask[i]
            guide.write_mask_into(row.data_ptr(), row.numel(), row.element_size())

    def accept(self, matcher: Any, token: int) -> bool:
        matcher.advance(token)
        return True


ENGINES: list[Callable[[Any], Any]] = [Xgrammar, Llguidance, OutlinesCore]


def median_time(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def apply_mask(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """The mask applied as the server applies it (one tensor for the batch)."""
    masked(logits, list(range(logits.shape[0])), bitmask)


def xgrammar_apply(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    import xgrammar as xgr

    xgr.apply_token_bitmask_inplace(logits.clone(), bitmask)


def step_cost(engine: Any, hf: Any, steps: int) -> tuple[float, float, float]:
    """Median seconds of one step's mask (32 rows), of its application to a copy of the
    logits as the server applies it, and as xgrammar's CPU kernel does."""
    compiled = engine.compile("json", NESTED)
    matchers = engine.matchers(compiled, BATCH)
    doc = hf.encode(NESTED_DOC, add_special_tokens=False)
    bitmask = torch.full((BATCH, (engine.vocab + 31) // 32), -1, dtype=torch.int32)
    logits = torch.randn(BATCH, engine.vocab)
    fills, applies, theirs = [], [], []
    for token in doc[:steps]:
        start = time.perf_counter()
        engine.fill(matchers, bitmask)
        filled = time.perf_counter()
        apply_mask(logits, bitmask)
        applied = time.perf_counter()
        xgrammar_apply(logits, bitmask)
        fills.append(filled - start)
        applies.append(applied - filled)
        theirs.append(time.perf_counter() - applied)
        allowed = bool((bitmask[0, token // 32] >> (token % 32)) & 1)
        if not allowed:
            raise AssertionError(f"{engine.name} refused a token of a valid document")
        for m in matchers:
            if not engine.accept(m, token):
                raise AssertionError(f"{engine.name} did not accept a token its mask allowed")
    return statistics.median(fills), statistics.median(applies), statistics.median(theirs)


def measure(tokenizers: dict[str, Any], steps: int, repeat: int) -> list[list[str]]:
    rows = []
    for tname, hf in tokenizers.items():
        for make in ENGINES:
            engine = make(hf)
            row = [engine.name, tname]
            for kind, spec in FORMS.values():
                try:
                    secs = median_time(lambda e=engine, k=kind, s=spec: e.compile(k, s), repeat)
                    row.append(f"{secs * 1e3:.1f}")
                except NotImplementedError:
                    row.append("-")
            row += [f"{secs * 1e6:.0f}" for secs in step_cost(engine, hf, steps)]
            rows.append(row)
            print(" | ".join(row), file=sys.stderr)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    tokenizers = {"tiny Llama (768)": tiny_llama(), "BPE 32k": bpe32k()}
    rows = measure(tokenizers, args.steps, args.repeat)
    head = ["engine", "tokenizer", *(f"{f} (ms)" for f in FORMS)]
    head += ["mask, 32 rows (µs)", "apply (µs)", "xgrammar's apply (µs)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
