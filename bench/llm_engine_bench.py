"""The LLM engine alone, in this process (no HTTP, no event-loop formatting): bursts of prompts
submitted at once, time to each request's first token and between its tokens.

    python bench/llm_engine_bench.py --concurrency 1,16,32 --repeat 3
    python bench/llm_engine_bench.py --prefix-words 60   # prompts sharing a 60-word preamble

``llm_bench.py`` measures the served path, where accepting and parsing a burst of requests
spreads their arrival; this measures what the engine does with prompts that are all waiting at
once. Each burst of ``c`` requests starts when the previous one ended; the model is the tiny
example Llama (``threads: 1``) unless ``--model`` names another folder. Extra model.yaml
parameters: ``--param name=value``. The table shows the median of ``--repeat`` runs and, after
a slash, the spread (max - min) of the runs.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from llm_bench import pct, prompts  # type: ignore[import-not-found]  # noqa: E402

from rosettaserve.core.generate import GenerateRequest, SamplingParams  # noqa: E402
from rosettaserve.runtimes.llm import LlmModel  # noqa: E402


async def burst(model: LlmModel, texts: list[str], output_len: int) -> dict[str, float]:
    params = SamplingParams(max_new_tokens=output_len, temperature=0.0, ignore_eos=True)

    async def one(text: str) -> tuple[float, list[float]]:
        start = time.perf_counter()
        times = []
        async for _ in model.generate(GenerateRequest(prompt=text, sampling=params)):
            times.append(time.perf_counter())
        return times[0] - start, [b - a for a, b in itertools.pairwise(times)]

    start = time.perf_counter()
    results = await asyncio.gather(*(one(t) for t in texts))
    duration = time.perf_counter() - start
    ttft = [r[0] * 1000 for r in results]
    itl = [gap * 1000 for r in results for gap in r[1]]
    return {
        "tok_s": len(texts) * output_len / duration,
        "ttft_p50": pct(ttft, 50),
        "ttft_p99": pct(ttft, 99),
        "itl_p50": pct(itl, 50),
        "itl_p99": pct(itl, 99),
    }


def main(args: argparse.Namespace) -> None:
    parameters: dict[str, object] = {"threads": 1}
    for item in args.param:
        name, value = item.split("=", 1)
        parameters[name] = int(value) if value.lstrip("-").isdigit() else value
    model = LlmModel(name="tiny_llama", path=Path(args.model), config={"parameters": parameters})
    model.load()
    try:
        rng = random.Random(args.seed)
        preamble = prompts(1, args.prefix_words, args.seed)[0] if args.prefix_words else ""
        asyncio.run(burst(model, prompts(4, args.input_len, args.seed), 8))  # warm-up
        keys = ["tok_s", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99"]
        print("| burst | out tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms |")
        print("|---|---|---|---|---|---|")
        for c in [int(x) for x in args.concurrency.split(",")]:
            runs = []
            for _ in range(args.repeat):
                texts = prompts(c, args.input_len, rng.randrange(1 << 30))
                texts = [f"{preamble} {t}".strip() for t in texts]
                runs.append(asyncio.run(burst(model, texts, args.output_len)))
            cells = []
            for k in keys:
                values = [r[k] for r in runs]
                spread = max(values) - min(values)
                cells.append(f"{statistics.median(values):.1f} / {spread:.1f}")
            print(f"| {c} at once | " + " | ".join(cells) + " |", flush=True)
    finally:
        model.unload()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", default=str(ROOT / "examples" / "models" / "tiny_llama"))
    parser.add_argument("--concurrency", default="1,16,32")
    parser.add_argument("--input-len", type=int, default=8, help="prompt length in words")
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument(
        "--prefix-words", type=int, default=0, help="a preamble every prompt shares"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--param", action="append", default=[], help="model.yaml name=value")
    main(parser.parse_args())
