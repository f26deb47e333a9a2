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

CONTROL_KINDS = tuple(f"CONTROL_SEQUENCE_{kind}" for kind in ("START", "END", "READY", "CORRID"))

SEQUENCE_CONTROL = Section(
    (
        Key("kind", Text(CONTROL_KINDS), "what the tensor carries", required=True),
        Key(
            "int32_false_true",
            ListOf(Integer()),
            "START, END, READY: the INT32 values meaning false and true",
        ),
        Key("data_type", Text(("UINT64", "BYTES")), "CORRID: the sequence id's datatype"),
    ),
    "a mapping {kind, int32_false_true | data_type}",
)

CONTROL_INPUT = Section(
    (
        Key("name", Text(), "the model's input that receives the control", required=True),
        Key("control", ListOf(SEQUENCE_CONTROL, 1), "one control", required=True),
    ),
    "a mapping {name, control}",
)

INITIAL_STATE = Section(
    (
        Key("name", Text(), "the initial state's name", ""),
        Key("data_type", Text(tuple(DTYPES)), "a V2 datatype (the state's)", required=True),
        Key("dims", ListOf(Integer(0)), "the first request's state dimensions", required=True),
        Key("zero_data", Flag(), "zeros: the only source offered", required=True),
    ),
    "a mapping {name, data_type, dims, zero_data}",
)

SEQUENCE_STATE = Section(
    (
        Key("input_name", Text(), "the model's input that receives the state", required=True),
        Key("output_name", Text(), "the model's output that holds the next state", required=True),
        Key("data_type", Text(tuple(DTYPES)), "a V2 datatype", required=True),
        Key("dims", ListOf(Integer(-1)), "without the batch dimension (-1: any size)", []),
        Key(
            "initial_state",
            INITIAL_STATE,
            "the state of a sequence's first request",
            default_doc="zeros, 1 for each -1 of dims",
        ),
    ),
    "a mapping {input_name, output_name, data_type, dims, initial_state}",
)

OLDEST = Section(
    (
        Key(
            "max_candidate_sequences",
            Integer(1),
            "sequences holding a slot of an instance at once (more wait for one)",
            default_doc="max_batch_size",
        ),
        Key("preferred_batch_size", ListOf(Integer(1)), "batch sizes to run at once", []),
        Key(
            "max_queue_delay_microseconds",
            Integer(0),
            "how long a request may wait for other sequences' requests",
            0,
        ),
    ),
    "a mapping {max_candidate_sequences, preferred_batch_size, max_queue_delay_microseconds}",
)

SEQUENCE_BATCHING = Section(
    (
        Key(
            "max_sequence_idle_microseconds",
            Integer(1),
            "a sequence without requests this long is released",
            1_000_000,
        ),
        Key("direct", Section((), "{}"), "each sequence keeps one batch slot (the default)"),
        Key("oldest", OLDEST, "the oldest requests of the sequences, batched together"),
        Key("control_input", ListOf(CONTROL_INPUT), "the control tensors the model takes", []),
        Key("state", ListOf(SEQUENCE_STATE), "implicit states the server keeps", []),
    ),
    "a mapping {max_sequence_idle_microseconds, direct | oldest, control_input, state}",
)

SEQUENCES = Key(
    "sequence_batching",
    SEQUENCE_BATCHING,
    "a stateful model: requests carry sequence_id, sequence_start and sequence_end",
)

ENSEMBLE_STEP = Section(
    (
        Key("model_name", Text(), "the served model this step calls", required=True),
        Key("model_version", Integer(-1), "its version (-1: the highest ready one)", -1),
        Key(
            "input_map",
            MapOf(Text(), "step input"),
            "the step model's inputs: each from an ensemble input or an earlier step's output",
            required=True,
        ),
        Key(
            "output_map",
            MapOf(Text(), "step output"),
            "the step model's outputs, named as ensemble tensors",
            required=True,
        ),
    ),
    "a mapping {model_name, model_version, input_map, output_map}",
)

STEPS = Key(
    "steps",
    ListOf(ENSEMBLE_STEP),
    "runtime ensemble: its steps (each runs once its inputs exist: fan-out and fan-in)",
    [],
)

RESPONSE_CACHE = Key(
    "response_cache",
    Flag(),
    "answers kept for requests with identical inputs, when the server runs with --cache-size "
    "(not for a model that streams, nor with sequence_batching)",
    False,
)
