"""Open Inference Protocol REST JSON (+ binary tensor data extension) <-> core. Pure functions."""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import orjson

from rosettaserve.core import dtypes, json_bulk, json_nonfinite, share
from rosettaserve.core.call import PROTOCOL, TIMEOUT_US
from rosettaserve.core.codec import INLINE_ELEMENTS, check_shape, from_json, from_raw, to_raw
from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.executor import LET_OTHERS_RUN, LargeWork, let_others_run
from rosettaserve.core.registry import ModelVersion
from rosettaserve.core.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from rosettaserve.protocols.oip import classification, requested, shared_memory

# Final: compiled, constants or C statics, not a lookup in the module's dict (a batched request
# looked up ~12 of them) [cost: final-static]
HEADER_LENGTH: Final = "inference-header-content-length"
BINARY_OUTPUT_KEY: Final = "binary_data_output"
BINARY_SIZE_KEY: Final = "binary_data_size"
BINARY_DATA_KEY: Final = "binary_data"
TIMEOUT_KEY: Final = "timeout"  # Triton's request parameter: the request's timeout in microseconds
PRIORITY_KEY: Final = "priority"  # Triton's request parameter: 1 the highest level, 0 the default
_NUMPY: Final = orjson.OPT_SERIALIZE_NUMPY
_FLOAT32: Final = np.dtype(np.float32)  # native byte order: what json_floats reads
# A float output of at most this many values is written as orjson writes it (NaN and the
# infinities as null) and the answer searched for "null" once, and only an answer holding one
# is written again with the tokens (json_nonfinite.array): testing the values first cost a
# small OIP REST request fifty times what the search costs [cost: null-search]. A larger output
# is tested first, which costs less than searching its text.
SEARCHED_VALUES: Final = 64
# Where a float32 output's text goes: json_floats (C) writes it straight into the answer, between
# the text orjson writes before and after this mark, which orjson never writes itself (it
# escapes a NUL in a string). orjson copying the array's text in as a Fragment cost ~0.25 ms of
# ~5.3 on 1 MiB of FP32 (bench/json_floats_cost.py).
_SPLICE_MARK: Final = b"\x00"
_SPLICE: Final = orjson.Fragment(_SPLICE_MARK)
_NO_OUTPUTS: Final[dict[str, dict[str, Any]]] = {}  # no outputs named: never written to
# Triton's extensions a tensor's parameters may ask for, looked up here (compiled) so that a
# request asking none of them never calls their modules (interpreted) [cost: extension-keys]
SHM_REGION: Final = shared_memory.REGION
SHM_OFFSET: Final = shared_memory.OFFSET
SHM_SIZE: Final = shared_memory.BYTE_SIZE
CLASSES: Final = classification.CLASSIFICATION
ANSWERED: Final = (shared_memory.OUTPUTS, classification.COUNTS)  # request.context keys


def asks_extensions(outputs: list[RequestedOutput] | None) -> bool:
    """Whether requested outputs ask for shared memory or classes (requested.note reads them)."""
    if outputs is not None:
        for out in outputs:
            p = out.parameters
            if p and (SHM_REGION in p or SHM_OFFSET in p or SHM_SIZE in p or CLASSES in p):
                return True
    return False


def answered_by_extensions(request: InferenceRequest) -> bool:
    """Whether the answer goes through requested.answer (classes, shared memory)."""
    context = request.context
    return ANSWERED[0] in context or ANSWERED[1] in context


def json_length(header: str | None, body_size: int) -> int:
    """How many leading body bytes are the JSON header (the rest is binary tensor data)."""
    if header is None:
        return body_size
    value = header.strip()
    if not (value.isascii() and value.isdigit()) or int(value) > body_size:  # not "³": int() fails
        raise InvalidInput(
            f"Inference-Header-Content-Length must be an integer in [0, {body_size}] "
            f"(the body size), got {header!r}"
        )
    return int(value)  # (0, a raw binary request, is read by raw_request.py)


def parse_json(data: bytes | bytearray | memoryview, what: str = "request body") -> Any:
    """A JSON document; tensor data may hold NaN, Infinity and -Infinity (core/json_nonfinite.py:
    what tritonclient sends for such values, and what answers carry)."""
    try:  # orjson here first: through json_nonfinite.loads (interpreted), which tries it too,
        return orjson.loads(data)  # [cost: orjson-first]
    except orjson.JSONDecodeError:
        pass
    try:
        return json_nonfinite.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"{what} is not valid JSON: {exc}") from None


def parse_infer(
    body: bytes | bytearray, header: str | None, model: str, version: str, inline: bool = False
) -> InferenceRequest:
    """Core's request from an infer body (``inline``: on the event loop, LargeWork for a BYTES
    tensor too large to decode there, core/codec.py)."""
    split = json_length(header, len(body))
    binary = split < len(body)  # (else no memoryview of the body) [cost: body-view]
    try:
        doc = None if binary else json_bulk.loads(body, b"data", _place_data)
        if doc is None:
            doc = parse_json(memoryview(body)[:split] if binary else body)
    except InvalidInput as exc:
        if header is None and b"binary_data_size" in body:
            raise InvalidInput(
                f"{exc.message}; a body that carries binary tensor data needs the "
                "Inference-Header-Content-Length header (the JSON part's length)"
            ) from None
        raise
    if not isinstance(doc, dict):
        raise InvalidInput("the inference request must be a JSON object with an 'inputs' list")
    blobs = _Blobs(memoryview(body)[split:] if binary else _NO_BLOBS, model)
    items = _list(doc, "inputs", True)
    inputs = [_parse_input(item, i, blobs, inline) for i, item in enumerate(items)]
    blobs.check_consumed()
    parameters = _parameters(doc.get("parameters"), "request")
    binary_default = bool(parameters.pop(BINARY_OUTPUT_KEY, False)) if parameters else False
    request = InferenceRequest(
        model_name=model,
        model_version=version,
        id=_request_id(doc.get("id")),
        inputs=inputs,
        outputs=_parse_outputs(doc.get("outputs")),
        parameters=parameters,
        context=request_context(parameters, "oip_rest", {BINARY_OUTPUT_KEY: binary_default}),
    )
    if asks_extensions(request.outputs):
        requested.note(request)
    return request


def _place_data(doc: Any, texts: list[memoryview]) -> int:
    """Bulk-read arrays go where they stood: the ``data`` of an input (an FP32 input's floats
    read as float32 straight away, json_bulk.read_array)."""
    used: set[int] = set()
    items = doc.get("inputs") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        return 0
    return sum(
        json_bulk.swap(i, "data", texts, used, i.get("datatype") == "FP32")
        for i in items
        if isinstance(i, dict)
    )


def request_context(
    parameters: dict[str, Any], protocol: str, context: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The data plane's side of a request: its protocol, and Triton's ``timeout`` parameter
    (microseconds, 0: none; it stays among the parameters a model receives, as it always did)
    and ``priority`` parameter (its level in the queues: core/share.py; it stays too)."""
    context = context or {}
    context[PROTOCOL] = protocol
    if TIMEOUT_KEY in parameters:
        value = parameters[TIMEOUT_KEY]
        if type(value) is not int or value < 0:
            raise InvalidInput(
                f"request parameter '{TIMEOUT_KEY}' must be a whole number of microseconds "
                f"(0: no timeout), got {value!r}"
            )
        context[TIMEOUT_US] = value
    if PRIORITY_KEY in parameters:
        level = share.triton_level(parameters[PRIORITY_KEY], f"request parameter '{PRIORITY_KEY}'")
        if level is not None:
            context[share.PRIORITY] = level
    return context


_NO_BLOBS: Final = memoryview(b"")  # the binary tail of a request without one


class _Blobs:
    """The binary tail of a request, handed out in input order."""

    def __init__(self, view: memoryview, model: str) -> None:
        self.view, self.offset, self.model = view, 0, model

    def take(self, size: int, name: str) -> memoryview:
        end = self.offset + size
        if end > len(self.view):
            raise InvalidInput(
                f"unexpected size for input '{name}': expecting {size} additional bytes but "
                f"only {len(self.view) - self.offset} remain after the JSON header "
                f"for model '{self.model}'"
            )
        chunk = self.view[self.offset : end]
        self.offset = end
        return chunk

    def check_consumed(self) -> None:
        extra = len(self.view) - self.offset
        if extra:
            raise InvalidInput(
                f"unexpected additional input data for model '{self.model}': {extra} bytes "
                "after the JSON header are not claimed by any input's binary_data_size"
            )


def _list(doc: dict[str, Any], key: str, required: bool) -> list[Any]:
    value = doc.get(key)
    if value is None and not required:
        return []
    if not isinstance(value, list):
        raise InvalidInput(
            f"'{key}' must be a JSON list" + (" and is required" if required else "")
        )
    return value


def _parse_input(item: Any, index: int, blobs: _Blobs, inline: bool) -> Tensor:
    if not isinstance(item, dict):
        raise InvalidInput(f"inputs[{index}] must be a JSON object")
    name = item.get("name")
    if not isinstance(name, str):
        raise InvalidInput(f"inputs[{index}] needs a string 'name'")
    if "datatype" not in item:
        raise InvalidInput(f"input '{name}' needs a 'datatype'")
    if "shape" not in item:
        raise InvalidInput(f"input '{name}' needs a 'shape'")
    dtype = dtypes.lookup(item["datatype"], name)
    shape = check_shape(item["shape"], name)
    params = _parameters(item.get("parameters"), "input", name)
    size = params.get(BINARY_SIZE_KEY)
    has_data = item.get("data") is not None  # kserve's client sends "data": null beside binary
    region = None
    if params and (SHM_REGION in params or SHM_OFFSET in params or SHM_SIZE in params):
        region = shared_memory.input_bytes(params, name)
    if region is not None or has_data == (size is not None):
        _one_source(name, has_data, size is not None, region is not None)
    if region is not None:
        data = from_raw(region, dtype, shape, name, inline)
    elif size is not None:
        if type(size) is not int or size < 0:
            raise InvalidInput(
                f"'binary_data_size' of input '{name}' must be a non-negative integer"
            )
        data = from_raw(blobs.take(size, name), dtype, shape, name, inline)
    else:
        data = from_json(item["data"], dtype, shape, name, inline)
    return Tensor(name, dtype.name, shape, data, params)


def _one_source(name: str, data: bool, binary: bool, region: bool) -> None:
    """An input's data comes from exactly one place: its 'data', the binary tail, or a
    shared-memory region (Triton's message, naming what was set)."""
    if data + binary + region == 1:
        return
    if not region:
        raise InvalidInput(
            f"input '{name}' must set exactly one of 'data' or 'binary_data_size' in 'parameters'"
        )
    named = [f"'{k}'" for k, on in (("data", data), ("binary_data_size", binary)) if on]
    raise InvalidInput(
        "Input must set only one of the following fields: 'data', 'binary_data_size' in "
        "'parameters', 'shared_memory_region' in 'parameters'. But set "
        + " ".join([*named, "'shared_memory_region'"])
    )


def _parse_outputs(value: Any) -> list[RequestedOutput] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidInput("'outputs' must be a JSON list of {\"name\": ...} objects")
    outputs = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise InvalidInput(f"outputs[{i}] must be an object with a string 'name'")
        outputs.append(RequestedOutput(item["name"], _parameters(item.get("parameters"), "output")))
    return outputs


def _parameters(value: Any, owner: str, name: str | None = None) -> dict[str, Any]:
    """``owner`` (and its ``name``): whose they are, for the error (its text is built only then:
    an input's name formatted for every request [cost: lazy-error-text])."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        whose = owner if name is None else f"{owner} '{name}'"
        raise InvalidInput(f"'parameters' of the {whose} must be a JSON object")
    return value


def _request_id(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise InvalidInput(f"'id' must be a string, got {type(value).__name__}")


# -- responses ---------------------------------------------------------------------------------


def encode_infer(
    response: InferenceResponse, request: InferenceRequest, inline: bool = False
) -> tuple[bytes, list[Any], int | None]:
    """The JSON (header), the binary tensor data that follows it (buffers, not joined: they go
    to the socket as they are), and, when there is binary data, the JSON header's length
    (``inline``: LargeWork for a BYTES output too large to encode on the event loop)."""
    default_binary = bool(request.context.get(BINARY_OUTPUT_KEY, False))
    wanted = {o.name: o.parameters for o in request.outputs} if request.outputs else _NO_OUTPUTS
    blobs: list[Any] = []
    outputs = []
    unsearched: list[dict[str, Any]] = []  # small float outputs, written before being tested
    spliced: list[np.ndarray] = []  # float32 outputs written into the answer (_SPLICE)
    for tensor in response.outputs:
        params = wanted.get(tensor.name, {})
        if params and SHM_REGION in params:  # written in shared memory: no data here
            outputs.append(_tensor_metadata(tensor))
            continue
        binary = bool(params.get(BINARY_DATA_KEY, default_binary))
        if inline and tensor.data.size > INLINE_ELEMENTS and tensor.datatype == "BYTES":
            raise LargeWork  # encoded one by one
        outputs.append(_encode_output(tensor, binary, blobs, unsearched, spliced))
    doc: dict[str, Any] = {}
    if response.id is not None:
        doc["id"] = response.id
    doc["model_name"] = response.model_name
    doc["model_version"] = response.model_version
    if response.parameters:
        doc["parameters"] = response.parameters
    doc["outputs"] = outputs
    header = orjson.dumps(doc, option=_NUMPY)
    # (find, not ``in``: bytes.__contains__ tries the operand as an int first) [cost: bytes-find]
    if unsearched and header.find(b"null") >= 0:  # maybe a NaN or infinity orjson wrote as null
        for out in unsearched:
            out["data"] = json_nonfinite.array(out["data"])
        header = orjson.dumps(doc, option=_NUMPY)
    if spliced:
        header = _splice(header, spliced)
    return header, blobs, len(header) if blobs else None


def _splice(header: bytes, arrays: list[np.ndarray]) -> bytes:
    """The answer with each mark replaced by its array's text (json_floats)."""
    writer = json_nonfinite.json_floats
    parts = header.split(_SPLICE_MARK)
    if len(arrays) == 1:  # the usual case: one copy of the text less
        return writer.write(arrays[0], parts[0], parts[1])
    texts = [parts[0]]
    for array, after in zip(arrays, parts[1:], strict=True):
        texts.append(writer.write(array, b"", after))
    return b"".join(texts)


def _encode_output(
    tensor: Tensor,
    binary: bool,
    blobs: list[Any],
    unsearched: list[dict[str, Any]],
    spliced: list[np.ndarray],
) -> dict[str, Any]:
    dtype = dtypes.lookup(tensor.datatype)
    out: dict[str, Any] = {"name": tensor.name, "datatype": dtype.name, "shape": list(tensor.shape)}
    params = tensor.parameters
    if binary:
        raw = to_raw(tensor.data, dtype)
        blobs.append(raw)
        params = {**params, BINARY_SIZE_KEY: len(raw)}
    elif dtype.name in ("FP32", "FP64") and tensor.data.size <= SEARCHED_VALUES:
        out["data"] = tensor.data.ravel()  # its non-finite values: see encode_infer
        unsearched.append(out)
    elif dtype.name == "FP32" and tensor.data.dtype == _FLOAT32 and json_nonfinite.json_floats:
        spliced.append(tensor.data.ravel())  # C-contiguous (a view when it already was)
        out["data"] = _SPLICE
    else:
        out["data"] = json_data(tensor, dtype)
    if params:
        out["parameters"] = params
    return out


def json_data(tensor: Tensor, dtype: dtypes.DType) -> Any:
    if not dtype.json_ok:
        raise InvalidInput(
            f"output '{tensor.name}' is {dtype.name}, which JSON cannot carry; "
            'request it with "parameters": {"binary_data": true}'
        )
    flat = tensor.data.ravel()  # C-contiguous, as orjson needs (a view when it already was)
    if dtype.is_bytes:
        try:
            return _texts(flat)
        except UnicodeDecodeError:
            raise InvalidInput(
                f"output '{tensor.name}' holds bytes that are not UTF-8 text; "
                'request it with "parameters": {"binary_data": true}'
            ) from None
    return json_nonfinite.array(flat)  # NaN, Infinity, -Infinity as such, not null


def _texts(flat: np.ndarray) -> list[str]:
    texts: list[str] = []
    for i, item in enumerate(flat):
        if i & LET_OTHERS_RUN == LET_OTHERS_RUN:
            let_others_run()  # (a long answer is written on the request-work threads)
        texts.append(item.decode())
    return texts


# -- metadata ----------------------------------------------------------------------------------


def model_metadata(mv: ModelVersion, versions: list[ModelVersion]) -> dict[str, Any]:
    properties = {"state": mv.state.value, "runtime": mv.runtime}
    if mv.reason:
        properties["reason"] = mv.reason
    return {
        "name": mv.name,
        "versions": [v.version for v in versions],
        "platform": mv.platform or mv.runtime,
        "inputs": [_tensor_metadata(s) for s in mv.inputs],
        "outputs": [_tensor_metadata(s) for s in mv.outputs],
        "properties": properties,
    }


def _tensor_metadata(spec: Any) -> dict[str, Any]:
    return {"name": spec.name, "datatype": spec.datatype, "shape": list(spec.shape)}
