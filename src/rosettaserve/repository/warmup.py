"""Warmup (model.yaml ``warmup``, as Triton's ``model_warmup``): samples run through a version
before it is ready, so its first client does not pay for lazy initialisation; a sample that
fails fails the load, with the sample's name and the reason.

A sample's arrays are made from its declaration: zeros, random values, or a file in the model's
``warmup/`` folder holding one batch-1 sample's values (repeated along the batch dimension, as
Triton does). The calls go to the version's invoker directly: they run on its instances, and the
statistics count clients' requests only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rosettaserve.core.dtypes import DTYPES
from rosettaserve.core.invoker import Invoker
from rosettaserve.core.model import Arrays
from rosettaserve.repository.declare import Problems
from rosettaserve.repository.model_yaml_triton import WARMUP_DATA

FOLDER = "warmup"
MAX_FILE_BYTES = 1 << 30  # a warmup file is read whole: beyond this it is a mistake
RANDOM_BYTES_LENGTH = 8  # letters in each random BYTES element
SEED = 0  # random_data is the same at every load


class WarmupFailed(ValueError):
    """A sample could not be made or its request failed: the version's load fails with it."""


@dataclass(frozen=True)
class WarmupInput:
    datatype: str
    dims: tuple[int, ...]
    source: str  # one of WARMUP_DATA
    file: str = ""


@dataclass(frozen=True)
class WarmupSample:
    name: str
    batch_size: int
    count: int
    inputs: tuple[tuple[str, WarmupInput], ...]


def samples(
    values: list[dict[str, Any]], max_batch_size: int, problems: Problems
) -> tuple[WarmupSample, ...]:
    """model.yaml's checked ``warmup`` list as samples; what one key cannot say alone (one data
    source per input, a batch size the model takes) goes to ``problems``."""
    found = []
    for i, doc in enumerate(values):
        where = f"warmup[{i}]"
        if doc["batch_size"] > max(1, max_batch_size):
            problems.add(
                f"{where}.batch_size",
                f"expected at most {max(1, max_batch_size)} (max_batch_size), "
                f"got {doc['batch_size']}",
            )
        inputs = []
        for name, spec in doc["inputs"].items():
            given = [key for key in WARMUP_DATA if spec.get(key)]
            if len(given) != 1:
                what = f"give exactly one of {', '.join(WARMUP_DATA)}"
                problems.add(f"{where}.inputs.{name}", what)
                continue
            source = given[0]
            file = spec[source] if source == "input_data_file" else ""
            inputs.append((name, WarmupInput(spec["data_type"], tuple(spec["dims"]), source, file)))
        found.append(WarmupSample(doc["name"], doc["batch_size"], doc["count"], tuple(inputs)))
    return tuple(found)


def sample_arrays(sample: WarmupSample, model_dir: Path, batched: bool) -> Arrays:
    """The sample's input arrays (reads its files: run it off the event loop)."""
    rng = np.random.default_rng(SEED)
    arrays: Arrays = {}
    for name, spec in sample.inputs:
        one = _values(spec, model_dir, rng)
        arrays[name] = np.repeat(one[None], sample.batch_size, axis=0) if batched else one
    return arrays


async def warm_up(
    invoker: Invoker, samples: tuple[WarmupSample, ...], arrays: list[Arrays]
) -> None:
    """Each sample ``count`` times (at least once), in order; the first failure stops it."""
    for sample, inputs in zip(samples, arrays, strict=True):
        for _ in range(max(1, sample.count)):
            try:
                if invoker.streams:
                    async for _item in invoker.stream(inputs, {}):
                        pass
                else:
                    await invoker.predict(inputs, {})
            except Exception as exc:
                reason = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
                raise WarmupFailed(f"warmup sample '{sample.name}' failed: {reason}") from exc


def _values(spec: WarmupInput, model_dir: Path, rng: np.random.Generator) -> np.ndarray:
    dtype = DTYPES[spec.datatype]
    count = math.prod(spec.dims)
    if spec.source == "input_data_file":
        data = _file(model_dir, spec.file)
        if dtype.is_bytes:
            return _bytes_elements(data, count).reshape(spec.dims)
        return _fixed(data, count, dtype.numpy).reshape(spec.dims)
    if dtype.is_bytes:
        if spec.source == "zero_data":
            return np.full(spec.dims, b"", dtype=object)
        letters = rng.integers(ord("a"), ord("z") + 1, (count, RANDOM_BYTES_LENGTH), np.uint8)
        return np.array([row.tobytes() for row in letters], dtype=object).reshape(spec.dims)
    if spec.source == "zero_data":
        return np.zeros(spec.dims, dtype.numpy)
    if dtype.numpy.kind == "b":
        return rng.integers(0, 2, spec.dims).astype(np.bool_)
    if dtype.numpy.kind in "iu":
        return rng.integers(0, 100, spec.dims).astype(dtype.numpy)
    return rng.random(spec.dims).astype(dtype.numpy)


def _file(model_dir: Path, name: str) -> bytes:
    """A file of the model's warmup/ folder, never one outside it."""
    folder = (model_dir / FOLDER).resolve()
    path = (folder / name).resolve()
    if not path.is_relative_to(folder) or not path.is_file():
        raise WarmupFailed(f"input_data_file {name!r} is not a file in {folder}")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise WarmupFailed(f"input_data_file {name!r} is over {MAX_FILE_BYTES} bytes")
    return path.read_bytes()


def _fixed(data: bytes, count: int, dtype: np.dtype) -> np.ndarray:
    need = count * dtype.itemsize
    if len(data) < need:
        raise WarmupFailed(f"the sample needs {need} bytes of data, its file has {len(data)}")
    return np.frombuffer(data[:need], dtype.newbyteorder("<")).astype(dtype)


def _bytes_elements(data: bytes, count: int) -> np.ndarray:
    out = np.empty(count, dtype=object)
    at = 0
    for i in range(count):
        if at + 4 > len(data):
            raise WarmupFailed(f"the sample needs {count} BYTES elements, its file has {i}")
        size = int.from_bytes(data[at : at + 4], "little")
        if at + 4 + size > len(data):
            raise WarmupFailed(f"BYTES element {i} of the file runs past its end")
        out[i] = data[at + 4 : at + 4 + size]
        at += 4 + size
    return out
