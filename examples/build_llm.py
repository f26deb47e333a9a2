"""Build the tiny example LLM from a fixed seed: nothing is downloaded.

    python examples/build_llm.py                 # -> examples/models/tiny_llama
    python examples/build_llm.py OUT_FOLDER
    python examples/build_llm.py --tools [OUT]   # -> build/tiny_llama_tools (see build_tools)

A byte-level BPE tokenizer is trained with the `tokenizers` library on the bundled text
(examples/llm/corpus.txt), with a ChatML chat template; a 2-layer Llama (hidden size 64) is
initialised from a fixed seed and trained for a few hundred steps on the same text, so that it
answers with bits of that text instead of noise. Both are written with ``save_pretrained``
(config, safetensors weights, tokenizer files, chat template), the layout `runtime: llm` serves.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "llm" / "corpus.txt"
DEFAULT_OUT = HERE / "models" / "tiny_llama"
TOOLS_OUT = HERE.parent / "build" / "tiny_llama_tools"
SEED = 20261121
VOCAB_SIZE = 768
CONTEXT = 512
TRAIN_STEPS = 300
WINDOW = 64
BATCH = 16
EOS, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
MODEL_YAML = """\
# A tiny Llama built by examples/build_llm.py (make builds it when it is missing).
runtime: llm
parameters:
  max_num_seqs: 32      # sequences decoded together (continuous batching)
  max_waiting: 64       # requests queued beyond that; more are refused with 429
  threads: 1            # torch intra-op threads: one is fastest for a model this small
"""


def build_tokenizer(text: str, extra_special: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[EOS, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    plain = [line for line in text.splitlines() if "<|" not in line]
    core.train_from_iterator(plain, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token=EOS, pad_token=EOS, unk_token=None
    )
    tokenizer.add_special_tokens({"additional_special_tokens": [IM_START, IM_END, *extra_special]})
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(  # type: ignore[no-untyped-def]
    vocab_size: int,
    eos_ids: list[int],
    heads: tuple[int, int, int | None] = (4, 2, None),
    context: int = CONTEXT,
):
    """``heads``: attention heads, key/value heads and head size (None: hidden size / heads)."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=heads[0],
        num_key_value_heads=heads[1],
        **({} if heads[2] is None else {"head_dim": heads[2]}),
        max_position_embeddings=context,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_ids,
        pad_token_id=eos_ids[0],
    )
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=eos_ids, pad_token_id=eos_ids[0])
    return model


def train(model, ids: list[int]) -> float:  # type: ignore[no-untyped-def]
    import torch

    data = torch.tensor(ids, dtype=torch.long)
    gen = torch.Generator().manual_seed(SEED)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, TRAIN_STEPS)
    model.train()
    loss = torch.tensor(0.0)
    for _ in range(TRAIN_STEPS):
        starts = torch.randint(0, len(data) - WINDOW - 1, (BATCH,), generator=gen)
        batch = torch.stack([data[s : s + WINDOW + 1] for s in starts.tolist()])
        loss = model(input_ids=batch[:, :-1], labels=batch[:, :-1]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    model.eval()
    return float(loss.detach())


def main(
    out: Path,
    heads: tuple[int, int, int | None] = (4, 2, None),
    model_yaml: str = MODEL_YAML,
    tools: bool = False,
) -> None:
    """``tools``: the tool-calling variant (build_tools)."""
    import torch

    torch.set_num_threads(1)  # one thread: the same weights on every machine of one ISA
    text = CORPUS.read_text(encoding="utf-8")
    tokenizer = build_tokenizer(text, TOOL_TOKENS if tools else ())
    eos_ids = [tokenizer.convert_tokens_to_ids(t) for t in (EOS, IM_END)]
    ids = tokenizer(text + EOS, add_special_tokens=False)["input_ids"]
    context = TOOLS_CONTEXT if tools else CONTEXT
    model = build_model(len(tokenizer), eos_ids, heads, context)
    loss = train(model, ids * 4)
    if tools:
        tokenizer.chat_template = TOOLS_CHAT_TEMPLATE
        loss = train_replies(model, tool_chats(tokenizer))
    tokenizer.model_max_length = context
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "model.yaml").write_text(model_yaml)
    print(f"built {out}: vocab {len(tokenizer)}, {len(ids)} corpus tokens, final loss {loss:.3f}")


# -- the tool-calling variant ---------------------------------------------------------------------
# build/tiny_llama_tools: the same Llama with hermes tool tokens (added special tokens, as Qwen's
# and Hermes' tokenizers have them), a hermes chat template that renders ``tools``, assistant
# ``tool_calls`` and ``role: tool`` results, and a little more training on chats rendered by
# that template: asked anything with tools offered, it calls ``get_weather`` for Paris; given
# a tool's result, it answers in words. So a test can drive a whole tool loop with greedy
# decoding, whatever it asks: the model does not decide, it was taught one habit.

TOOL_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
TOOLS_CONTEXT = 2048
TOOLS_CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n<tools>\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}</tools>\n"
    'Call a function as <tool_call>\n{"name": <name>, "arguments": <arguments>}\n'
    "</tool_call><|im_end|>\n"
    "{% elif messages[0].role == 'system' %}"
    "<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'system' and loop.first %}"
    "{% elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n"
    "{{ message.tool_call_id }}: {{ message.content }}\n</tool_response><|im_end|>\n"
    "{% elif message.role == 'assistant' %}<|im_start|>assistant\n"
    "{{ message.content or '' }}"
    "{% for call in message.tool_calls or [] %}<tool_call>\n"
    '{"name": "{{ call.function.name }}", "arguments": '
    "{{ call.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CALL_REPLY = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOOLS_MODEL_YAML = """\
# The tiny Llama with hermes tool calls, built by examples/build_llm.py --tools (make builds it).
runtime: llm
parameters:
  tool_parser: hermes   # how its answers' tool calls are read (vLLM's parser names)
  threads: 1
"""
TOOL_STEPS = 500


def weather_tool(rng) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """get_weather as clients describe it: plain, or as a typed SDK writes its schema."""
    parameters: dict[str, object] = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }
    function: dict[str, object] = {"name": "get_weather", "parameters": parameters}
    if rng.random() < 0.5:
        parameters["properties"] = {"city": {"title": "City", "type": "string"}}
        parameters |= {"title": "get_weather_args", "additionalProperties": False}
        function["strict"] = rng.random() < 0.5
    if rng.random() < 0.7:
        function["description"] = rng.choice(
            ("The weather in a city", "Get the weather for a city.")
        )
    return {"type": "function", "function": function}


def tool_chats(tokenizer) -> list[tuple[list[int], int]]:  # type: ignore[no-untyped-def]
    """(token ids, where the assistant's reply begins) of the chats the tools model learns:
    varied prompts (words of the corpus, systems, tool schemas), always the same two habits."""
    import random

    rng = random.Random(SEED)
    words = CORPUS.read_text(encoding="utf-8").split()
    call = {
        "id": "",
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
    }
    out = []
    for k in range(96):
        question = " ".join(rng.choices(words, k=rng.randint(2, 12))) + rng.choice(("?", ".", ""))
        system = " ".join(rng.choices(words, k=rng.randint(0, 10)))
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": question})
        tools = [weather_tool(rng)]
        reply = CALL_REPLY
        if k % 2:  # the tool's result is back: answer in words
            call_id = f"call_{rng.getrandbits(40):x}"
            messages.append(
                {"role": "assistant", "content": "", "tool_calls": [{**call, "id": call_id}]}
            )
            result = " ".join(rng.choices(words, k=rng.randint(1, 6)))
            messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
            reply = "It is sunny."
        prompt = tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=True
        )
        ids = tokenizer(prompt + reply + IM_END, add_special_tokens=False)["input_ids"]
        out.append((ids, len(tokenizer(prompt, add_special_tokens=False)["input_ids"])))
    return out


def train_replies(model, chats: list[tuple[list[int], int]]) -> float:  # type: ignore[no-untyped-def]
    """Trained on the replies of ``chats`` only (the prompt tokens carry no loss)."""
    import torch

    gen = torch.Generator().manual_seed(SEED)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.0)
    model.train()
    loss = torch.tensor(0.0)
    for _ in range(TOOL_STEPS):
        picks = torch.randint(0, len(chats), (4,), generator=gen).tolist()
        width = max(len(chats[p][0]) for p in picks)
        ids = torch.full((len(picks), width), 0, dtype=torch.long)
        labels = torch.full((len(picks), width), -100, dtype=torch.long)
        for row, p in enumerate(picks):
            seq, start = chats[p]
            ids[row, : len(seq)] = torch.tensor(seq)
            labels[row, start : len(seq)] = torch.tensor(seq[start:])
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return float(loss.detach())


def build_tools(out: Path = TOOLS_OUT, again: bool = False) -> Path:
    """``out`` holds the tools model (built when its weights are missing, or ``again``)."""
    if again or not (out / "model.safetensors").is_file():
        main(out, model_yaml=TOOLS_MODEL_YAML, tools=True)
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--tools"]:
        build_tools(Path(args[1]) if len(args) > 1 else TOOLS_OUT, again=True)
    else:
        main(Path(args[0]) if args else DEFAULT_OUT)
