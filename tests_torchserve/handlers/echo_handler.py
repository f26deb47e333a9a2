"""Tells what the handler was handed (the data's shape and the context) and answers with the
status, content type, error or kind of answer a request asks for in its JSON body's ``do``."""

import os

import torch
from ts.utils.util import PredictionException

ANSWERS = {  # do: what the handler returns for the request (how TorchServe encodes each)
    "bytes": lambda: b"\x00raw\xff",
    "tensor": lambda: torch.tensor([1.5, -2.0]),
    "nested": lambda: {"b": [1, 2.5, None, True], "a": "\u00e9"},
    "unencodable": object,
    "pid": os.getpid,
}


def handle(data, context):
    if data is None:  # TorchServe's initialisation call of a function entry point
        return None
    first = data[0].get("body")
    first = first.get("do") if isinstance(first, dict) else None
    if first == "not_list":
        return {"not": "a list"}
    if first == "short":
        return []
    answers = []
    for i, item in enumerate(data):
        value = item.get("body", item.get("data"))
        do = value.get("do") if isinstance(value, dict) else None
        if do == "raise":
            raise ValueError("the handler failed")
        if do == "prediction_exception":
            raise PredictionException("the input is refused", 422)
        if do == "status":
            context.set_response_status(418, "teapot", i)
        if do == "exit":  # the worker process dies mid-batch
            os._exit(3)
        if do == "header":
            context.set_response_header(i, "x-answer", "yes")
        if do in ANSWERS:
            answers.append(ANSWERS[do]())
            continue
        if do == "text":
            context.set_response_content_type(i, "text/plain")
            answers.append("plain text")
            continue
        answers.append(describe(i, item, value, context))
    return answers


def describe(i, item, value, context):
    props = context.system_properties
    manifest_file = os.path.join(props["model_dir"], "MAR-INF", "MANIFEST.json")
    return {
        "keys": sorted(item),
        "type": type(value).__name__,
        "value": len(value) if isinstance(value, (bytes, bytearray)) else value,
        "param_headers": {k: context.get_request_header(i, k) for k in sorted(item)},
        "x_trace": context.get_request_header(i, "x-trace"),
        "url_path": context.get_request_header(i, "url_path"),
        "explain": context.get_request_header(i, "explain"),
        "model_name": context.model_name,
        "handler": context.manifest["model"]["handler"],
        "batch_size": props["batch_size"],
        "gpu_id": props["gpu_id"],
        "has_manifest": os.path.isfile(manifest_file),
        "yaml": context.model_yaml_config,
        "request_id_is_set": bool(context.get_request_id(i)),
    }
