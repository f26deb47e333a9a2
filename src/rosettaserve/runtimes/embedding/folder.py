"""What a transformers or sentence-transformers folder says about how texts become vectors or
scores, read as sentence-transformers reads it (without importing it): the modules in
``modules.json`` (Transformer, Pooling, Normalize; any other is refused at load), the pooling of
``1_Pooling/config.json`` (the old ``pooling_mode_*_tokens`` flags or the newer ``pooling_mode``),
``max_seq_length`` and ``do_lower_case`` of ``sentence_bert_config.json``, the default prompt of
``config_sentence_transformers.json``, and a cross-encoder's activation."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rosettaserve.repository.config import ConfigError

POOLINGS = ("mean", "cls", "last", "max", "mean_sqrt_len")
# the old Pooling config's flags, in the order sentence-transformers concatenates them
_OLD_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
    "pooling_mode_lasttoken": "last",
}
_NEW_MODES = {"mean": "mean", "cls": "cls", "max": "max", "lasttoken": "last"}
_NEW_MODES |= {"mean_sqrt_len_tokens": "mean_sqrt_len", "last": "last"}
ACTIVATIONS = ("sigmoid", "identity", "tanh")


@dataclass(frozen=True)
class FolderPlan:
    pooling: str | None  # None: the folder does not say (parameters.pooling, else mean)
    normalize: bool | None  # None: the folder does not say (parameters.normalize, else true)
    max_seq_length: int | None
    lower_case: bool
    prompt: str  # the default prompt sentence-transformers puts before every text


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} cannot be read as JSON: {exc}") from None


def embedder_plan(folder: Path) -> FolderPlan:
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        return FolderPlan(None, None, _bert_config(folder).get("max_seq_length"), False, "")
    pooling, normalize, with_prompt = None, False, True
    for module in read_json(modules_file):
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        path = folder / str(module.get("path", ""))
        if kind == "Pooling":
            config = read_json(path / "config.json")
            pooling, with_prompt = _pooling(config, path), config.get("include_prompt", True)
        elif kind == "Normalize":
            normalize = True
        elif kind != "Transformer":
            raise ConfigError(
                f"{modules_file}: module {module.get('type')!r} is not served by runtime: "
                "embedding (it serves Transformer, Pooling and Normalize)"
            )
    if pooling is None:
        raise ConfigError(f"{modules_file} has no Pooling module: runtime: embedding needs one")
    bert, prompt = _bert_config(folder), _default_prompt(folder)
    if prompt and not with_prompt:
        raise ConfigError(
            f"{folder}: a default prompt left out of the pooling (include_prompt: false) is not "
            "served by runtime: embedding"
        )
    return FolderPlan(
        pooling,
        normalize,
        bert.get("max_seq_length"),
        bool(bert.get("do_lower_case", False)),
        prompt,
    )


def _bert_config(folder: Path) -> dict[str, Any]:
    path = folder / "sentence_bert_config.json"
    return dict(read_json(path)) if path.is_file() else {}


def _pooling(config: dict[str, Any], path: Path) -> str:
    if "pooling_mode" in config:  # sentence-transformers 5's layout
        mode = config["pooling_mode"]
        modes = [mode] if isinstance(mode, str) else list(mode)
    else:
        modes = [name for flag, name in _OLD_FLAGS.items() if config.get(flag)]
        modes = [_NEW_MODES.get(m, m) for m in modes]
    modes = [_NEW_MODES.get(m, m) for m in modes]
    if len(modes) != 1 or modes[0] not in POOLINGS:
        raise ConfigError(
            f"{path}: pooling {modes} is not served by runtime: embedding (one of {POOLINGS})"
        )
    return str(modes[0])


def _default_prompt(folder: Path) -> str:
    path = folder / "config_sentence_transformers.json"
    if not path.is_file():
        return ""
    doc = read_json(path)
    name = doc.get("default_prompt_name")
    return str((doc.get("prompts") or {}).get(name, "")) if name else ""


def activation(folder: Path, config: Any) -> str:
    """A cross-encoder's activation as ``CrossEncoder.predict`` applies it by default: the one
    its folder names, else a sigmoid for one label and none for more."""
    named = None
    path = folder / "config_sentence_transformers.json"
    if path.is_file():
        named = read_json(path).get("activation_fn")
    st = getattr(config, "sentence_transformers", None)
    if named is None and isinstance(st, dict):
        named = st.get("activation_fn")
    if named is None:
        named = getattr(config, "sbert_ce_default_activation_function", None)
    if named is None:
        return "sigmoid" if int(config.num_labels) == 1 else "identity"
    short = str(named).rsplit(".", 1)[-1].lower()
    if short not in ACTIVATIONS:
        raise ConfigError(
            f"the cross-encoder's activation {named!r} is not served by runtime: embedding "
            "(Sigmoid, Identity or Tanh)"
        )
    return short
