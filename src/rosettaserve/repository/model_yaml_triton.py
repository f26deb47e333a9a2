"""model.yaml's keys for Triton's model-serving extensions (shared/CONTRACT.md, "Triton's
model-serving extensions"), spelt as Triton's config.pbtxt fields in YAML with V2 datatype names.

``repository.model_yaml`` puts them in ``MODEL_YAML``; they are declared here, apart, so each
extension's keys read together.
"""

from __future__ import annotations

from rosettaserve.core.dtypes import DTYPES
from rosettaserve.repository.declare import Flag, Integer, Key, ListOf, MapOf, Section, Text

WARMUP_DATA = ("zero_data", "random_data", "input_data_file")  # exactly one per input

WARMUP_INPUT = Section(
    (
        Key("data_type", Text(tuple(DTYPES)), "a V2 datatype", required=True),
        Key("dims", ListOf(Integer(0)), "the sample's dimensions, without the batch dimension", []),
        Key("zero_data", Flag(), "zeros (empty strings for BYTES, false for BOOL)"),
        Key("random_data", Flag(), "random values (random letters for BYTES)"),
        Key(
            "input_data_file",
            Text(),
            "a file in the model's warmup/ folder: the values' raw little-endian bytes "
            "(BYTES: each a 4-byte little-endian length, then its bytes)",
        ),
    ),
    "a mapping {data_type, dims, and one of zero_data, random_data, input_data_file}",
)

WARMUP_SAMPLE = Section(
    (
        Key("name", Text(), "the sample's name (in the reason of a failed load)", required=True),
        Key("batch_size", Integer(1), "rows of the batch dimension (1 without max_batch_size)", 1),
        Key("count", Integer(0), "times the sample runs (0: once)", 0),
        Key("inputs", MapOf(WARMUP_INPUT, "input name"), "the sample's inputs", required=True),
    ),
    "a mapping {name, batch_size, count, inputs}",
)

WARMUP = Key(
    "warmup",
    ListOf(WARMUP_SAMPLE),
    "requests run through the model before its version is ready; a failure fails the load",
    [],
)

RESPONSE_CACHE = Key(
    "response_cache",
    Flag(),
    "answers kept for requests with identical inputs, when the server runs with --cache-size "
    "(not for a model that streams, nor with sequence_batching)",
    False,
)
