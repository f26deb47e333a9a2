"""Build the tiny example embedding and rerank models from a fixed seed: nothing is downloaded.

    python examples/build_embedding.py            # -> examples/models/tiny_embedder, tiny_reranker
    python examples/build_embedding.py OUT_DIR    # -> OUT_DIR/tiny_embedder, OUT_DIR/tiny_reranker
    python examples/build_embedding.py OUT_DIR --heads 2   # head size 32 (vLLM's CPU attention)

A WordPiece tokenizer (lower-cased, BERT's pre-tokenizer and ``[CLS] … [SEP]`` template) is
trained with the `tokenizers` library on the bundled text (examples/llm/corpus.txt). Two 2-layer
BERTs (hidden size 64) are initialised from fixed seeds, untrained: served vectors are compared
with sentence-transformers' own on the same folder, not judged for meaning.

- ``tiny_embedder``: ``BertModel`` written as a sentence-transformers folder in the layout most
  published models have (``modules.json``: Transformer, then ``1_Pooling`` with mean pooling, then
  ``2_Normalize``; ``sentence_bert_config.json`` with ``max_seq_length``), and
  ``matryoshka_dimensions`` in its config.json, so the OpenAI ``dimensions`` field is allowed.
- ``tiny_reranker``: ``BertForSequenceClassification`` with one label, the folder
  ``sentence_transformers.CrossEncoder`` loads (its score: the logit through a sigmoid).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "llm" / "corpus.txt"
DEFAULT_OUT = HERE / "models"
SEED = 20261129
VOCAB_SIZE = 600
POSITIONS = 128  # max_position_embeddings
MAX_SEQ_LENGTH = 64  # the embedder's sentence_bert_config: longer texts are truncated
HIDDEN = 64
MATRYOSHKA = [16, 32, 64]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
EMBEDDER_YAML = """\
# A tiny BERT saved as a sentence-transformers folder, built by examples/build_embedding.py
# (make builds it when it is missing). Pooling and normalization come from its folder.
runtime: embedding
max_batch_size: 64      # texts run together; more in one request are refused (400)
dynamic_batching: true  # no delay: the next batch gathers while one runs
parameters:
  threads: 1            # torch intra-op threads
"""
RERANKER_YAML = """\
# A tiny BERT cross-encoder (one label), built by examples/build_embedding.py.
runtime: embedding
max_batch_size: 64      # (query, text) pairs run together
dynamic_batching: true
parameters:
  task: rerank
  threads: 1
"""


def build_tokenizer(text: str):  # type: ignore[no-untyped-def]
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import BertTokenizerFast

    core = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    core.normalizer = normalizers.BertNormalizer(lowercase=True)
    core.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    core.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=SPECIALS, show_progress=False
    )
    core.train_from_iterator(text.splitlines(), trainer)
    cls, sep = core.token_to_id("[CLS]"), core.token_to_id("[SEP]")
    core.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return BertTokenizerFast(
        tokenizer_object=core,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=POSITIONS,
    )


def bert_config(vocab_size: int, heads: int = 4, **extra: object):  # type: ignore[no-untyped-def]
    """``heads``: attention heads (4: head size 16; vLLM's CPU attention needs 2: head size 32)."""
    from transformers import BertConfig

    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=heads,
        intermediate_size=128,
        max_position_embeddings=POSITIONS,
        **extra,
    )


def write_json(path: Path, doc: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")


def build_embedder(out: Path, tokenizer, heads: int = 4) -> None:  # type: ignore[no-untyped-def]
    import torch
    from transformers import BertModel

    torch.manual_seed(SEED)
    config = bert_config(len(tokenizer), heads, matryoshka_dimensions=MATRYOSHKA)
    BertModel(config).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    modules = [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")]
    write_json(
        out / "modules.json",
        [
            {"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"}
            for i, (path, kind) in enumerate(modules)
        ],
    )
    write_json(
        out / "sentence_bert_config.json",
        {"max_seq_length": MAX_SEQ_LENGTH, "do_lower_case": False},
    )
    write_json(
        out / "1_Pooling" / "config.json",
        {
            "word_embedding_dimension": HIDDEN,
            "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": True,
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
            "pooling_mode_weightedmean_tokens": False,
            "pooling_mode_lasttoken": False,
            "include_prompt": True,
        },
    )
    (out / "2_Normalize").mkdir(exist_ok=True)
    (out / "model.yaml").write_text(EMBEDDER_YAML)


def build_reranker(out: Path, tokenizer, heads: int = 4) -> None:  # type: ignore[no-untyped-def]
    import torch
    from transformers import BertForSequenceClassification

    torch.manual_seed(SEED + 1)
    model = BertForSequenceClassification(bert_config(len(tokenizer), heads, num_labels=1))
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "model.yaml").write_text(RERANKER_YAML)


def main(out: Path, heads: int = 4) -> None:
    import torch

    torch.set_num_threads(1)  # one thread: the same weights on every machine of one ISA
    tokenizer = build_tokenizer(CORPUS.read_text(encoding="utf-8"))
    build_embedder(out / "tiny_embedder", tokenizer, heads)
    build_reranker(out / "tiny_reranker", tokenizer, heads)
    print(f"built {out}/tiny_embedder and {out}/tiny_reranker: vocab {len(tokenizer)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="the tiny example embedder and reranker")
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--heads", type=int, default=4, help="2: head size 32 (vLLM's CPU)")
    args = parser.parse_args()
    main(args.out, args.heads)
