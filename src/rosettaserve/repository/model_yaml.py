"""model.yaml, declared: every key the project defines, its type, default and meaning, and the
runtimes with the parameters each one reads.

``repository.config`` checks a model.yaml against ``MODEL_YAML`` (and ``parameters`` against the
runtime's own section); ``scripts/gen_config_doc.py`` writes docs/model-yaml.md from the same
tables. A key added to the server is added here, and nowhere else is it spelt out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rosettaserve.core.dtypes import DTYPES
from rosettaserve.protocols.tools import PARSERS
from rosettaserve.repository.declare import (
    Either,
    Flag,
    Free,
    Integer,
    Key,
    ListOf,
    MapOf,
    Number,
    Problems,
    Section,
    Text,
)
from rosettaserve.repository.model_yaml_triton import RESPONSE_CACHE, SEQUENCES, STEPS, WARMUP

ISOLATIONS = ("thread", "process")
LOAD_MODES = ("eager", "lazy")
TOOL_PARSERS = tuple(sorted(PARSERS))
TF_METHODS = ("predict", "classify", "regress")
LLM_DTYPES = ("float32", "float16", "bfloat16", "float64")


@dataclass(frozen=True)
class Runtime:
    """A runtime: where its model class is, what it needs installed, the parameters it reads."""

    name: str
    factory: str  # "module:attribute", imported only when a model asks for this runtime
    doc: str
    parameters: Section | None = None  # None: free-form, handed to the model as they are
    packages: tuple[str, ...] = ()  # modules it imports, installed by the extra below
    extra: str = ""  # pip install 'rosettaserve[extra]'
    apart: bool = False  # its extra cannot share a venv with the others ([all] leaves it out)


FILE = "file"


def _file(default: str) -> Key:
    return Key(FILE, Text(), "the weights file, relative to the version folder", default)


ONNX_PARAMETERS = Section(
    (
        _file("model.onnx"),
        Key("intra_op_threads", Integer(0), "ONNX Runtime's intra-op threads (0: its choice)", 0),
        Key("inter_op_threads", Integer(0), "ONNX Runtime's inter-op threads (0: its choice)", 0),
        Key(
            "allow_spinning",
            Flag(),
            "ONNX Runtime's pool threads spin while they wait for work: quicker to start an op, "
            "but the CPU they burn is taken from the event loop and the neighbours of a shared "
            "or limited CPU",
            False,
        ),
        Key(
            "providers",
            ListOf(Text(), 1),
            "ONNX Runtime execution providers, in order of preference",
            ["CPUExecutionProvider"],
        ),
    )
)

LLM_PARAMETERS = Section(
    (
        Key("path", Text(), "a save_pretrained folder elsewhere", default_doc="the version folder"),
        Key("device", Text(), "torch device, e.g. cuda, cuda:1 (sampling stays on the CPU)", "cpu"),
        Key("dtype", Text(LLM_DTYPES), "weights' dtype", "float32"),
        Key(
            "threads",
            Integer(1, 1024),
            "torch intra-op threads (process-wide)",
            default_doc="torch's default",
        ),
        Key(
            "max_model_len",
            Integer(2),
            "prompt and output tokens together",
            default_doc="the model config's max_position_embeddings",
        ),
        Key("max_num_seqs", Integer(1, 4096), "sequences decoded together", 32),
        Key("max_waiting", Integer(0), "sequences queued beyond those; more get 429", 64),
        Key("max_n", Integer(1, 128), "the largest n a request may ask for", 8),
        Key("kv_budget_tokens", Integer(0), "KV cache tokens of running sequences (0: none)", 0),
        Key(
            "prefill_chunk_tokens",
            Integer(16, 1 << 20),
            "prompt tokens (padding included) prefilled per engine iteration",
            96,
        ),
        Key(
            "prefix_cache_tokens",
            Integer(0, 1 << 30),
            "prompt tokens whose KV the prefix cache keeps (0: off)",
            4096,
        ),
        Key(
            "prefix_block_tokens",
            Integer(1, 4096),
            "the prefix cache's block: prefixes are reused by whole blocks",
            16,
        ),
        Key(
            "vllm_stream_format",
            Text(("vllm", "mindie")),
            "vLLM /generate stream framing: vllm (current) or mindie (vLLM 0.2's, as MindIE)",
            "vllm",
        ),
        Key(
            "tool_parser",
            Text(TOOL_PARSERS),
            "how chat answers' tool calls are read (vLLM's names; none: no tool_choice auto)",
            default_doc="none",
        ),
    )
)

EMBEDDING_PARAMETERS = Section(
    (
        Key("path", Text(), "a save_pretrained folder elsewhere", default_doc="the version folder"),
        Key(
            "task",
            Text(("embed", "rerank")),
            "embed: texts to vectors; rerank: a cross-encoder",
            "embed",
        ),
        Key(
            "pooling",
            Text(("mean", "cls", "last", "max", "mean_sqrt_len")),
            "token vectors to one (embed)",
            default_doc="the sentence-transformers folder's, else mean",
        ),
        Key(
            "normalize",
            Flag(),
            "unit-length vectors (embed)",
            default_doc="the folder's Normalize module, else true",
        ),
        Key(
            "max_length",
            Integer(1),
            "tokens read per text; the rest is cut",
            default_doc="sentence_bert_config's max_seq_length, else the tokenizer's",
        ),
        Key(
            "matryoshka_dimensions",
            ListOf(Integer(1)),
            "sizes OpenAI's `dimensions` may cut a vector to",
            default_doc="config.json's matryoshka_dimensions, else none",
        ),
        Key("batch_tokens", Integer(1), "rows x longest row of one forward pass", 8192),
        Key(
            "max_chars",
            Integer(0),
            "a longer text is refused (400), not tokenized whole (0: no limit)",
            default_doc="64 x max_length, at least 16384",
        ),
        Key("device", Text(), "torch device, e.g. cuda", "cpu"),
        Key("dtype", Text(("float32", "float16", "bfloat16")), "weights' dtype", "float32"),
        Key(
            "threads",
            Integer(1, 1024),
            "torch intra-op threads (process-wide)",
            default_doc="torch's default",
        ),
    )
)

TORCHSERVE_PARAMETERS = Section(
    (
        _file("model.mar"),
        Key(
            "batch_size",
            Integer(1),
            "requests handed to the handler at once",
            default_doc="the archive's model-config.yaml batchSize, else 1",
        ),
        Key(
            "max_batch_delay",
            Number(0.0),
            "milliseconds a batch waits for batch_size requests",
            default_doc="maxBatchDelay, else 100",
        ),
        Key(
            "workers",
            Integer(1, 256),
            "handler instances serving at once",
            default_doc="minWorkers, else 1",
        ),
    )
)

VLLM_DTYPES = ("auto", "float32", "float16", "bfloat16")

# vLLM's engine arguments under vLLM's names; the rest of them go in engine_args
VLLM_PARAMETERS = Section(
    (
        Key("path", Text(), "a save_pretrained folder elsewhere", default_doc="the version folder"),
        Key(
            "task",
            Text(("generate", "embed", "rerank")),
            "generate: an LLM; embed, rerank: a pooling model on the embedding routes",
            "generate",
        ),
        Key("dtype", Text(VLLM_DTYPES), "weights' dtype (vLLM's auto: bfloat16 on CPU)", "float32"),
        Key(
            "max_model_len",
            Integer(2),
            "prompt and output tokens together",
            default_doc="vLLM's: the model config's",
        ),
        Key("max_num_seqs", Integer(1, 4096), "sequences scheduled together", default_doc="vLLM's"),
        Key("max_waiting", Integer(0), "sequences queued beyond those; more get 429", 64),
        Key("max_n", Integer(1, 128), "the largest n a request may ask for", 8),
        Key(
            "max_num_batched_tokens",
            Integer(1),
            "tokens scheduled in one engine step",
            default_doc="vLLM's",
        ),
        Key(
            "kv_cache_memory_bytes",
            Integer(1),
            "the KV cache's size in bytes (on CPU also VLLM_CPU_KVCACHE_SPACE, in GiB)",
            default_doc="vLLM's: from gpu_memory_utilization",
        ),
        Key(
            "gpu_memory_utilization",
            Number(0.0),
            "the fraction of device memory vLLM takes (on CPU: of host memory)",
            default_doc="vLLM's (0.92)",
        ),
        Key("block_size", Integer(1), "tokens per KV cache block", default_doc="vLLM's"),
        Key(
            "enable_prefix_caching",
            Flag(),
            "reuse the KV of shared prompt prefixes",
            default_doc="vLLM's",
        ),
        Key(
            "enable_chunked_prefill", Flag(), "prefill long prompts in chunks", default_doc="vLLM's"
        ),
        Key("enforce_eager", Flag(), "no compiled graphs", default_doc="vLLM's"),
        Key(
            "max_logprobs",
            Integer(0),
            "the most top_logprobs a request may ask",
            default_doc="vLLM's",
        ),
        Key("seed", Integer(0), "the engine's random seed", 0),
        Key(
            "engine_args",
            Free("a mapping", mapping=True),
            "any other vLLM engine argument, as vLLM's AsyncEngineArgs names it "
            "(scheduling_policy: priority unless set here; fcfs refuses a non-zero priority)",
            {},
        ),
        Key(
            "vllm_stream_format",
            Text(("vllm", "mindie")),
            "vLLM /generate stream framing: vllm (current) or mindie (vLLM 0.2's, as MindIE)",
            "vllm",
        ),
        Key(
            "tool_parser",
            Text(TOOL_PARSERS),
            "how chat answers' tool calls are read (vLLM's names; none: no tool_choice auto)",
            default_doc="none",
        ),
    )
)

RUNTIMES: dict[str, Runtime] = {
    r.name: r
    for r in (
        Runtime(
            "python",
            "rosettaserve.runtimes.python:create",
            "the class from model.py; parameters are free-form (self.config['parameters'])",
        ),
        Runtime(
            "onnx",
            "rosettaserve.runtimes.onnx:OnnxModel",
            "model.onnx with ONNX Runtime (CPU); the signature is read from the graph",
            ONNX_PARAMETERS,
            ("onnxruntime",),
            "onnx",
        ),
        Runtime(
            "sklearn",
            "rosettaserve.runtimes.sklearn:SklearnModel",
            "model.joblib (a pickle: serve only files you trust) with joblib",
            Section((_file("model.joblib"),)),
            ("joblib", "sklearn"),
            "sklearn",
        ),
        Runtime(
            "llm",
            "rosettaserve.runtimes.llm:LlmModel",
            "a transformers causal LM as save_pretrained writes it, behind the generation engine",
            LLM_PARAMETERS,
            ("torch", "transformers"),
            "llm",
        ),
        Runtime(
            "embedding",
            "rosettaserve.runtimes.embedding:EmbeddingModel",
            "a transformers or sentence-transformers folder: texts to vectors, or a cross-encoder",
            EMBEDDING_PARAMETERS,
            ("torch", "transformers"),
            "llm",
        ),
        Runtime(
            "vllm",
            "rosettaserve.runtimes.vllm:create",
            "the same folder served by vLLM's engine (V1 AsyncLLM), in a venv of its own",
            VLLM_PARAMETERS,
            ("vllm",),
            "vllm",
            apart=True,  # vLLM brings transformers 5; the llm extra pins 4.57
        ),
        Runtime(
            "ensemble",
            "rosettaserve.runtimes.ensemble:EnsembleModel",
            "Triton's ensemble: served models run as steps (steps in model.yaml), no files",
        ),
        Runtime(
            "torchserve",
            "rosettaserve.runtimes.torchserve.model:create",
            "a TorchServe .mar archive (or its unpacked folder) served with its own handler",
            TORCHSERVE_PARAMETERS,
            ("ts", "torch"),
            "torchserve",
            # out of [all]: TorchServe's package carries its 44 MiB Java frontend, unused here;
            # tested from a venv of its own (.venv-torchserve, tests_torchserve/)
            apart=True,
        ),
    )
}


TENSOR_NAMES = Free("a list of tensor names, or a mapping of aliases to names")


TENSOR = Section(
    (
        Key("name", Text(), "the tensor's name", required=True),
        Key("datatype", Text(tuple(DTYPES)), "a V2 datatype", required=True),
        Key("shape", ListOf(Integer(-1)), "dimensions, -1 for a variable one", [-1]),
    ),
    "a mapping {name, datatype, shape}",
)

VERSION_POLICY = Section(
    (
        Key("latest", Integer(1), "serve the N highest versions"),
        Key("all", Flag(), "serve every version (true)"),
        Key("specific", ListOf(Integer(0), 1), "serve these versions"),
    ),
    "one of {latest: N}, {all: true}, {specific: [N, ...]}",
    one_of=True,
)

DYNAMIC_BATCHING = Section(
    (
        Key(
            "preferred_batch_size",
            ListOf(Integer(1)),
            "batch sizes to run at once when reached (each at most max_batch_size)",
            [],
        ),
        Key(
            "max_queue_delay_microseconds",
            Integer(0),
            "how long a request may wait for others to batch with",
            0,
        ),
    ),
    "a mapping {preferred_batch_size, max_queue_delay_microseconds}",
)

TF_SIGNATURE = Section(
    (
        Key("method", Text(TF_METHODS), "the signature's method", "predict"),
        Key("inputs", TENSOR_NAMES, "inputs it takes", default_doc="every input"),
        Key("outputs", TENSOR_NAMES, "outputs it gives", default_doc="every output"),
    ),
    "a mapping {method, inputs, outputs}",
)

MODEL_YAML = Section(
    (
        Key("runtime", Text(tuple(RUNTIMES)), "the runtime that loads the model", required=True),
        Key(
            "class",
            Text(),
            "python runtime: the model class in model.py",
            default_doc="its only Model class",
        ),
        Key("max_batch_size", Integer(0), "> 0: the first dimension is the batch dimension", 0),
        Key("inputs", ListOf(TENSOR), "the inputs, where the runtime cannot read them", []),
        Key("outputs", ListOf(TENSOR), "the outputs, where the runtime cannot read them", []),
        Key("version_policy", VERSION_POLICY, "the versions served", {"latest": 1}),
        Key("labels", MapOf(Integer(0), "label"), "version labels: label to version", {}),
        Key(
            "parameters",
            Free("a mapping", mapping=True),
            "handed to the runtime: free-form for python, declared by the others (below)",
            {},
        ),
        Key(
            "dynamic_batching",
            Either((Flag(), DYNAMIC_BATCHING)),
            "true or a mapping: requests run together (needs max_batch_size > 0)",
            False,
        ),
        Key(
            "max_queue_size",
            Integer(0),
            "requests waiting beyond this get 429 (0: no limit), but for an API key under its "
            "weighted share",
            default_doc="--max-queue-size",
        ),
        Key(
            "default_timeout_microseconds",
            Integer(0),
            "timeout of queue and execution (0: none)",
            default_doc="--request-timeout",
        ),
        Key(
            "instances",
            Integer(1),
            "calls of this model that run at once",
            default_doc="one per core for onnx and sklearn, else 1",
        ),
        Key(
            "isolation",
            Text(ISOLATIONS),
            "thread: in the server process; process: worker processes (python, torchserve)",
            "thread",
        ),
        Key(
            "load",
            Text(LOAD_MODES),
            "eager: at start; lazy: on its first request, which waits for it",
            default_doc="--load",
        ),
        Key(
            "unload_after_idle",
            Number(0.0),
            "seconds unused after which it is unloaded (loaded again on its next request)",
            default_doc="never",
        ),
        WARMUP,
        SEQUENCES,
        STEPS,
        RESPONSE_CACHE,
        Key(
            "tfserving",
            Section(
                (Key("signatures", MapOf(TF_SIGNATURE, "signature name"), "extra signatures", {}),),
                "a mapping {signatures}",
            ),
            "TF Serving signatures beside serving_default",
            {},
        ),
    )
)


def check_parameters(runtime: str, parameters: Any, problems: Problems) -> None:
    """``parameters`` against what ``runtime`` declares (nothing, for a free-form runtime)."""
    declared = RUNTIMES[runtime].parameters if runtime in RUNTIMES else None
    if declared is not None and isinstance(parameters, dict):
        declared.checked(parameters, "parameters", problems)
