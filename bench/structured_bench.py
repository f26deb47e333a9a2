"""Structured output under load: output tokens/s at 32 concurrent streams, json_schema-
constrained against the same requests unconstrained, on one server (and, with ``--vllm``, on
vLLM's own server and on rosettaserve with vLLM's engine, in the same run).

    PYTHONPATH=src .venv/bin/python bench/structured_bench.py [--repeat 3] [--vllm]

Each run: ``--requests`` streamed /v1/completions (bench/llm_bench.py's client and prompts),
``--concurrency`` at a time, greedy, ``max_tokens`` ``--output-len``; the unconstrained ones
with ``ignore_eos``, the constrained ones with vLLM's ``structured_outputs: {"json": SCHEMA}``
(rosettaserve reads it as vLLM does). The schema's answers are longer than ``--output-len``
tokens (16 strings), so both kinds generate exactly ``--output-len`` tokens each: the work is
the same but the mask. Kinds alternate (unconstrained, constrained, ...) ``--repeat`` rounds;
the table shows each kind's median and best tokens/s and their ratios (on a shared machine
the bests say more: other work only ever slows a run down). The model is the tiny example Llama
(``runtime: llm``); with ``--vllm``, the head-size-32 tiny Llama (tests_vllm/build_model.py)
for all three servers, as bench/llm_vs_vllm.py serves them.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import llm_bench  # noqa: E402
import llm_vs_vllm  # noqa: E402
import orjson  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {
        "notes": {
            "type": "array",
            "items": {"type": "string", "maxLength": 8},
            "minItems": 16,
            "maxItems": 16,
        }
    },
    "required": ["notes"],
    "additionalProperties": False,
}
CONSTRAINED = {"structured_outputs": {"json": SCHEMA}}
UNCONSTRAINED = {"ignore_eos": True}


async def run(port: int, args: argparse.Namespace, extra: dict[str, Any]) -> dict[str, float]:
    gate = asyncio.Semaphore(args.concurrency)

    async def send(prompt: str) -> llm_bench.Result:
        body = orjson.dumps(
            {
                "model": "tiny_llama",
                "prompt": prompt,
                "max_tokens": args.output_len,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
                **extra,
            }
        )
        async with gate:
            return await llm_bench.one_request("127.0.0.1", port, body)

    prompts = llm_bench.prompts(args.requests, args.input_len, 0)
    start = asyncio.get_running_loop().time()
    results = await asyncio.gather(*(send(p) for p in prompts))
    m = llm_bench.metrics(list(results), asyncio.get_running_loop().time() - start)
    if m["failed"]:
        raise SystemExit(f"{m['failed']:.0f} requests failed")
    short = [r.output_tokens for r in results if r.output_tokens != args.output_len]
    if short:  # the same work or the ratio means nothing
        raise SystemExit(f"{len(short)} answers ended early ({short[:4]} tokens)")
    return m


def measure(ports: dict[str, int], args: argparse.Namespace) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {}
    for port in ports.values():  # warm-up (the schema compiled)
        for extra in (UNCONSTRAINED, CONSTRAINED):
            asyncio.run(run(port, argparse.Namespace(**{**vars(args), "requests": 4}), extra))
    for _ in range(args.repeat):
        for name, port in ports.items():
            for kind, extra in (("unconstrained", UNCONSTRAINED), ("json_schema", CONSTRAINED)):
                m = asyncio.run(run(port, args, extra))
                figures.setdefault(f"{name} {kind}", []).append(m["output_throughput"])
    return figures


def table(ports: dict[str, int], figures: dict[str, list[float]]) -> str:
    lines = [
        "| server | unconstrained tok/s | json_schema tok/s | ratio (medians) | ratio (bests) |",
        "|---|---|---|---|---|",
    ]
    for name in ports:
        plain, schema = figures[f"{name} unconstrained"], figures[f"{name} json_schema"]
        mid = statistics.median(schema) / statistics.median(plain)
        best = max(schema) / max(plain)
        lines.append(
            f"| {name} | {statistics.median(plain):.0f} (best {max(plain):.0f}) | "
            f"{statistics.median(schema):.0f} (best {max(schema):.0f}) | {mid:.2f}x | {best:.2f}x |"
        )
    return "\n".join(lines)


def main(args: argparse.Namespace) -> None:
    names = ["rosetta", "vllm", "rosetta+vllm"] if args.vllm else ["rosetta"]
    every = llm_vs_vllm.free_ports(["rosetta", "vllm", "rosetta+vllm"])  # (commands' keys)
    ports = {name: every[name] for name in names}
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = llm_vs_vllm.DEFAULT_OUT if args.vllm else ROOT / "examples/models/tiny_llama"
        if args.vllm:
            llm_vs_vllm.build(model)
        cmds = llm_vs_vllm.commands(root, model, every)
        try:
            for name in names:
                log = root / f"{name}.log"
                procs.append(llm_vs_vllm.start(name, cmds[name], ports[name], log))
            figures = measure(ports, args)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=60)
    print(table(ports, figures))
    print("runs (tok/s):", {k: [round(v) for v in vs] for k, vs in figures.items()})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--vllm", action="store_true", help="vLLM's server and engine too")
    main(parser.parse_args())
