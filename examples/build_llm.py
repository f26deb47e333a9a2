"""Build the tiny example LLM from a fixed seed: nothing is downloaded.

    python examples/build_llm.py                 # -> examples/models/tiny_llama
    python examples/build_llm.py OUT_FOLDER

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


def build_tokenizer(text: str):  # type: ignore[no-untyped-def]
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
    tokenizer.add_special_tokens({"additional_special_tokens": [IM_START, IM_END]})
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(  # type: ignore[no-untyped-def]
    vocab_size: int, eos_ids: list[int], heads: tuple[int, int, int | None] = (4, 2, None)
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
        max_position_embeddings=CONTEXT,
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
    out: Path, heads: tuple[int, int, int | None] = (4, 2, None), model_yaml: str = MODEL_YAML
) -> None:
    import torch

    torch.set_num_threads(1)  # one thread: the same weights on every machine of one ISA
    text = CORPUS.read_text(encoding="utf-8")
    tokenizer = build_tokenizer(text)
    eos_ids = [tokenizer.convert_tokens_to_ids(t) for t in (EOS, IM_END)]
    ids = tokenizer(text + EOS, add_special_tokens=False)["input_ids"]
    model = build_model(len(tokenizer), eos_ids, heads)
    loss = train(model, ids * 4)
    tokenizer.model_max_length = CONTEXT
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "model.yaml").write_text(model_yaml)
    print(f"built {out}: vocab {len(tokenizer)}, {len(ids)} corpus tokens, final loss {loss:.3f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT)
