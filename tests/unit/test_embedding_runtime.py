"""runtime: embedding's pieces apart from a model: what it reads of a folder (both layouts of
sentence-transformers' Pooling config, what it refuses), how rows are cut into padded batches,
and the answers' helpers (Matryoshka cuts, ranking)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from rosettaserve.core import embedding as hub
from rosettaserve.core.errors import InvalidInput
from rosettaserve.repository.config import ConfigError
from rosettaserve.runtimes.embedding import encode, folder

INFO = hub.EmbeddingInfo(hub.EMBED, 8, True, 16, 4, 100, (2, 4))


def st_folder(tmp_path: Path, pooling: dict[str, object], *extra: str) -> Path:
    kinds = [("", "Transformer"), ("1_Pooling", "Pooling"), *[(k, k) for k in extra]]
    modules = [
        {"idx": i, "name": str(i), "path": p, "type": f"sentence_transformers.models.{k}"}
        for i, (p, k) in enumerate(kinds)
    ]
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return tmp_path


@pytest.mark.parametrize(
    ("pooling", "want"),
    [
        ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, "cls"),
        ({"pooling_mode_mean_tokens": True}, "mean"),
        ({"pooling_mode_lasttoken": True}, "last"),
        ({"embedding_dimension": 8, "pooling_mode": "lasttoken"}, "last"),  # 5.x's layout
        ({"embedding_dimension": 8, "pooling_mode": "mean"}, "mean"),
    ],
)
def test_pooling_of_either_layout(tmp_path: Path, pooling: dict[str, object], want: str) -> None:
    plan = folder.embedder_plan(st_folder(tmp_path, pooling, "Normalize"))
    assert (plan.pooling, plan.normalize) == (want, True)


def test_without_normalize_module_vectors_are_not_normalized(tmp_path: Path) -> None:
    plan = folder.embedder_plan(st_folder(tmp_path, {"pooling_mode_mean_tokens": True}))
    assert plan.normalize is False


def test_a_plain_transformers_folder_leaves_it_to_the_parameters(tmp_path: Path) -> None:
    plan = folder.embedder_plan(tmp_path)
    assert (plan.pooling, plan.normalize) == (None, None)


@pytest.mark.parametrize(
    ("pooling", "extra", "message"),
    [
        ({"pooling_mode_mean_tokens": True}, ("Dense",), "Dense"),
        ({"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True}, (), "pooling"),
        ({"pooling_mode_weightedmean_tokens": True}, (), "pooling"),
    ],
)
def test_what_is_not_served_fails_the_load(
    tmp_path: Path, pooling: dict[str, object], extra: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        folder.embedder_plan(st_folder(tmp_path, pooling, *extra))


def test_a_pooling_module_is_needed_and_a_left_out_prompt_is_refused(tmp_path: Path) -> None:
    (tmp_path / "modules.json").write_text(
        json.dumps([{"idx": 0, "name": "0", "path": "", "type": "x.Transformer"}])
    )
    with pytest.raises(ConfigError, match="no Pooling module"):
        folder.embedder_plan(tmp_path)
    (tmp_path / "modules.json").unlink()
    st = st_folder(tmp_path, {"pooling_mode": "mean", "include_prompt": False})
    assert folder.embedder_plan(st).prompt == ""  # no prompt: nothing to leave out
    (st / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "query: "}, "default_prompt_name": "query"})
    )
    with pytest.raises(ConfigError, match="include_prompt"):
        folder.embedder_plan(st)


def test_cross_encoder_activation(tmp_path: Path) -> None:
    one, two = SimpleNamespace(num_labels=1), SimpleNamespace(num_labels=2)
    assert folder.activation(tmp_path, one) == "sigmoid"
    assert folder.activation(tmp_path, two) == "identity"
    named = SimpleNamespace(num_labels=1, sentence_transformers={"activation_fn": "torch.nn.Tanh"})
    assert folder.activation(tmp_path, named) == "tanh"
    (tmp_path / "config_sentence_transformers.json").write_text(
        json.dumps({"activation_fn": "torch.nn.modules.linear.Identity"})
    )
    assert folder.activation(tmp_path, one) == "identity"
    (tmp_path / "config_sentence_transformers.json").write_text(
        json.dumps({"activation_fn": "my.Custom"})
    )
    with pytest.raises(ConfigError, match=r"my\.Custom"):
        folder.activation(tmp_path, one)


def test_batches_are_longest_first_within_the_token_budget() -> None:
    rows = [([1] * n, [0] * n) for n in (3, 10, 1, 10, 4)]
    got = list(encode.batches(rows, batch_tokens=20))
    assert got == [[1, 3], [4, 0, 2]]  # 2 x 10 tokens, then 3 x 4
    assert sorted(i for b in got for i in b) == list(range(len(rows)))
    assert list(encode.batches([([1] * 50, [0] * 50)], batch_tokens=20)) == [[0]]


def test_padded_on_the_right() -> None:
    ids, types, mask = encode.padded([([5, 6, 7], [0, 0, 1]), ([8], [0])], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert types.tolist() == [[0, 0, 1], [0, 0, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0]]


def test_run_puts_rows_back_in_request_order() -> None:
    rows = [([1] * n, [0] * n) for n in (2, 5, 1)]

    def forward(ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return mask.sum(axis=1, keepdims=True).astype(np.float32)

    assert encode.run(rows, 4, 0, forward).ravel().tolist() == [2.0, 5.0, 1.0]


def test_matryoshka_cut_is_unit_length_again() -> None:
    vectors = np.arange(16, dtype=np.float32).reshape(2, 8) + 1
    cut = hub.cut(hub.normalized(vectors), INFO, 4)
    np.testing.assert_allclose(np.linalg.norm(cut, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(cut, hub.normalized(vectors[:, :4]), rtol=1e-6)
    hub.check_dimensions(INFO, 8)
    with pytest.raises(InvalidInput, match=r"one of \[2, 4\]"):
        hub.check_dimensions(INFO, 3)


def test_ranking_is_highest_first_ties_in_order() -> None:
    assert hub.ranking(np.array([0.1, 0.9, 0.1, 0.5], dtype=np.float32)) == [1, 3, 0, 2]


def test_token_ids_are_checked_before_the_model_runs() -> None:
    tensor = hub.ids_tensor(INFO, [[1, 2, 99]])
    assert np.frombuffer(tensor.data[0], "<i4").tolist() == [1, 2, 99]
    for rows, message in (([[100]], "vocabulary"), ([[1] * 17], "more than"), ([[]], "empty")):
        with pytest.raises(InvalidInput, match=message):
            hub.ids_tensor(INFO, rows)
