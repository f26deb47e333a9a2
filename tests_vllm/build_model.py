"""The tiny Llama of examples/build_llm.py with a head size of 32, which vLLM's CPU attention
needs (the example's is 16): same corpus, tokenizer, seed and training; nothing is downloaded.

    python tests_vllm/build_model.py build/tiny_llama_h32
    python tests_vllm/build_model.py --tools build/tiny_llama_tools_h32   # with tool calls

The folder gets a ``model.yaml`` for ``runtime: llm``; the tests and bench/llm_vs_vllm.py
write their own for ``runtime: vllm`` beside the same files.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "build" / "tiny_llama_h32"
TOOLS_OUT = ROOT / "build" / "tiny_llama_tools_h32"
HEAD_SIZE = 32


def example_builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_llm", ROOT / "examples" / "build_llm.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = example_builder()


def build(out: Path, again: bool = False) -> Path:
    """``out`` holds the model (built when its weights are missing, or ``again``)."""
    if again or not (out / "model.safetensors").is_file():
        # the example's Llama with its attention as 2 heads of 32 (1 key/value head)
        yaml = example.MODEL_YAML.replace("examples/build_llm.py", __file__)
        example.main(out, heads=(2, 1, HEAD_SIZE), model_yaml=yaml)
    return out


def build_tools(out: Path = TOOLS_OUT, again: bool = False) -> Path:
    """The example's tools model (build_llm.py --tools) with the head size vLLM needs."""
    if again or not (out / "model.safetensors").is_file():
        yaml = example.TOOLS_MODEL_YAML.replace("examples/build_llm.py --tools", __file__)
        example.main(out, heads=(2, 1, HEAD_SIZE), model_yaml=yaml, tools=True)
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--tools"]:
        build_tools(Path(args[1]) if len(args) > 1 else TOOLS_OUT, again=True)
    else:
        build(Path(args[0]) if args else DEFAULT_OUT, again=True)
