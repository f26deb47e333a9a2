"""Folders laid out otherwise than the example's, read by runtime: embedding as
sentence-transformers reads them: a default prompt, lower-casing, other poolings, the newer
Pooling layout, no Normalize, a plain transformers folder. Each against sentence-transformers'
own ``encode`` on the same folder (the model in-process: no server)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rosettaserve.runtimes.embedding import EmbeddingModel
from tests.conftest import EXAMPLES
from tests.integration.embedding_support import EMBEDDER, TEXTS, close


def edit_json(path: Path, change: Callable[[Any], Any]) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def with_prompt(folder: Path) -> None:
    (folder / "config_sentence_transformers.json").write_text(
        json.dumps(
            {"prompts": {"query": "query: ", "document": ""}, "default_prompt_name": "query"}
        )
    )


def lower_cased(folder: Path) -> None:
    edit_json(folder / "sentence_bert_config.json", lambda d: d | {"do_lower_case": True})


def pooling(mode: str) -> Callable[[Path], None]:
    def change(folder: Path) -> None:
        (folder / "1_Pooling" / "config.json").write_text(
            json.dumps({"embedding_dimension": 64, "pooling_mode": mode, "include_prompt": True})
        )

    return change


def without_normalize(folder: Path) -> None:
    edit_json(folder / "modules.json", lambda mods: [m for m in mods if m["path"] != "2_Normalize"])


def plain(folder: Path) -> None:
    """A transformers folder alone: sentence-transformers mean-pools it, unnormalized."""
    for name in ("modules.json", "sentence_bert_config.json"):
        (folder / name).unlink()
    shutil.rmtree(folder / "1_Pooling")


VARIANTS: dict[str, tuple[Callable[[Path], None], dict[str, Any]]] = {
    "default prompt": (with_prompt, {}),
    "lower case": (lower_cased, {}),
    "cls (5.x layout)": (pooling("cls"), {}),
    "max": (pooling("max"), {}),
    "lasttoken": (pooling("lasttoken"), {}),
    "mean_sqrt_len_tokens": (pooling("mean_sqrt_len_tokens"), {}),
    "no Normalize": (without_normalize, {}),
    "plain transformers": (plain, {"normalize": False}),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_folder_variant_equals_sentence_transformers(tmp_path: Path, variant: str) -> None:
    from sentence_transformers import SentenceTransformer

    folder = tmp_path / "model"
    shutil.copytree(EXAMPLES / EMBEDDER, folder)
    change, parameters = VARIANTS[variant]
    change(folder)
    model = EmbeddingModel("m", "1", folder, {"parameters": parameters})
    model.load()
    texts = [t.upper() for t in TEXTS]  # lower-casing shows
    got = model.predict({"TEXT": np.array([t.encode() for t in texts], dtype=object)})
    want = SentenceTransformer(str(folder), device="cpu").encode(texts)
    close(got["EMBEDDING"], want)
