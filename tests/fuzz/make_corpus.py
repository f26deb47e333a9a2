"""Write the seed corpora (``tests/fuzz/corpus/TARGET/``) from real requests: the tensors of
tests/v2data.py, the benchmark's bodies (bench/compare/bodies.py), and what real clients
(python-hyper's h2 and hpack) send. Run again after a change of the wire formats:

    python -m tests.fuzz.make_corpus
"""

from __future__ import annotations

import base64
import gzip
import json
import shutil
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import hpack
import ml_dtypes
import numpy as np

from tests.fuzz.targets.hpack_decoder import frame_blocks
from tests.v2data import EXTREMES_64, JSON_DATATYPES, sample

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "bench" / "compare"))
import bodies  # noqa: E402  (the benchmark's request bodies)
import spec  # noqa: E402

BENCH = spec.ServerSpec(name="fuzz", key="fuzz", argv=(), model="identity_fp32")
MAX_SEED = 4096  # bytes: what the fuzzer's inputs may be (run.py's MAX_LEN)


def oip_json(model_dtype: str, tensor: np.ndarray, name: str = "INPUT0") -> bytes:
    data = [v.decode("latin-1") if isinstance(v, bytes) else v for v in tensor.ravel().tolist()]
    doc = {"inputs": [{"name": name, "shape": list(tensor.shape), "datatype": model_dtype}]}
    doc["inputs"][0]["data"] = data
    doc["outputs"] = [{"name": "OUTPUT0", "parameters": {"binary_data": False}}]
    return json.dumps(doc).encode()


def oip_bodies() -> dict[str, bytes]:
    out = {}
    for dtype in JSON_DATATYPES:
        tensor = sample(dtype, "fuzz", non_finite=False, non_utf8=False)
        out[f"infer_{dtype.lower()}.json"] = oip_json(dtype, tensor)
    small = bodies.tensor_for(spec.REST_SMALL)
    out["bench_rest_small.json"] = bodies.json_body(BENCH, small)
    wide = np.random.default_rng(9).standard_normal((1, 200)).astype(np.float32)
    out["bulk_fp32.json"] = bodies.json_body(BENCH, wide)  # past json_bulk's MIN_ARRAY
    ints = np.arange(-300, 300, dtype=np.int64).reshape(1, -1)
    out["bulk_int64.json"] = oip_json("INT64", ints)
    binary = bodies.binary_body(BENCH, small)
    out["binary_fp32.bin"] = b"#%d\n" % (len(binary) - small.nbytes) + binary
    strings = b"".join(len(s).to_bytes(4, "little") + s for s in (b"", b"a", b"bc\0"))
    for name, count in (("binary_bytes.bin", 3), ("binary_bytes_past_the_body.bin", 10**9)):
        tensor = {"name": "s", "datatype": "BYTES", "shape": [1, count]}
        tensor["parameters"] = {"binary_data_size": len(strings)}
        head = json.dumps({"inputs": [tensor]}).encode()
        out[name] = b"#%d\n" % len(head) + head + strings
    out["raw_fp32_row.bin"] = b"#0\n" + np.arange(3, dtype="<f4").tobytes()  # a raw request
    out["raw_text.bin"] = b"#0\nhello"
    placed = {"shared_memory_region": "fuzz", "shared_memory_byte_size": 16}
    tensor = {"name": "x", "datatype": "FP32", "shape": [1, 4], "parameters": placed}
    out["shm_input.json"] = json.dumps({"inputs": [tensor]}).encode()
    moved = {**placed, "shared_memory_offset": 60}  # past the region's end
    outputs = [{"name": "y", "parameters": {**moved, "classification": 2}}]
    out["shm_output.json"] = json.dumps({"inputs": [], "outputs": outputs}).encode()
    return out


def http_requests(infer: bytes, bulk: bytes) -> dict[str, bytes]:
    def post(path: str, body: bytes, extra: str = "") -> bytes:
        head = f"POST {path} HTTP/1.1\r\nHost: fuzz\r\nContent-Type: application/json\r\n{extra}"
        return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body

    chunked = (
        b"POST /v2/models/identity_fp32/infer HTTP/1.1\r\nHost: fuzz\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(infer), infer)
    )
    tfs = b'{"instances": [1.0, 2.0, 5.0]}'
    return {
        "get_ready.http": b"GET /v2/health/ready HTTP/1.1\r\nHost: fuzz\r\n\r\n",
        "head_metadata.http": b"HEAD /v2/models/identity_fp32 HTTP/1.1\r\nHost: fuzz\r\n\r\n",
        "http10.http": b"GET /v2 HTTP/1.0\r\n\r\n",
        "infer.http": post("/v2/models/identity_fp32/infer", infer),
        "infer_bulk.http": post("/v2/models/identity_fp32/infer", bulk),
        "infer_expect.http": post(
            "/v2/models/identity_fp32/infer", infer, "Expect: 100-continue\r\n"
        ),
        "infer_chunked.http": chunked,
        "tfserving_predict.http": post("/v1/models/half_plus_two:predict", tfs),
        "grps_infer.http": post("/grps/v1/infer/predict", b'{"str_data": "hi"}'),
        "pipelined.http": b"GET /v2/health/live HTTP/1.1\r\nHost: fuzz\r\n\r\n" * 2
        + post("/v2/models/identity_fp32/infer", infer, "Connection: close\r\n"),
        "upgrade.http": b"GET /v2/health/ready HTTP/1.1\r\nHost: fuzz\r\nConnection: Upgrade\r\n"
        b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n",
    }


def grpc_messages() -> dict[str, bytes]:
    from rosettaserve.protocols.oip.pb import grpc_service_pb2 as pb

    small = bodies.tensor_for(spec.GRPC_SMALL)
    out = {
        "bench_typed.pb": bodies.grpc_message(BENCH, BENCH.model, small, raw=False),
        "bench_raw.pb": bodies.grpc_message(BENCH, BENCH.model, small, raw=True),
    }
    fields = {"BOOL": "bool_contents", "INT32": "int_contents", "INT64": "int64_contents"}
    fields |= {"UINT32": "uint_contents", "UINT64": "uint64_contents", "FP32": "fp32_contents"}
    fields |= {"FP64": "fp64_contents", "BYTES": "bytes_contents"}
    for dtype, field in fields.items():
        tensor = sample(dtype, "fuzz")
        request = pb.ModelInferRequest(model_name=f"identity_{dtype.lower()}", id="r1")
        request.parameters["sequence_id"].int64_param = 7
        item = request.inputs.add(name="INPUT0", datatype=dtype, shape=list(tensor.shape))
        getattr(item.contents, field).extend(tensor.ravel().tolist())
        request.outputs.add(name="OUTPUT0").parameters["binary_data"].bool_param = True
        out[f"typed_{dtype.lower()}.pb"] = request.SerializeToString()
    return out


def client_connection(path: str, message: bytes, extra: list[tuple[str, str]]) -> bytes:
    """What python-hyper's h2 client sends for one gRPC call, after the preface."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    headers = [(":method", "POST"), (":scheme", "http"), (":path", path)]
    headers += [(":authority", "fuzz"), ("content-type", "application/grpc"), ("te", "trailers")]
    client.send_headers(1, headers + extra)
    client.send_data(1, b"\x00" + struct.pack(">I", len(message)) + message, end_stream=True)
    client.ping(b"12345678")
    client.increment_flow_control_window(1000)
    return client.data_to_send()[len(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") :]


def h2_connections(messages: dict[str, bytes]) -> dict[str, bytes]:
    infer = "/inference.GRPCInferenceService/ModelInfer"
    return {
        "infer_typed.h2": client_connection(infer, messages["bench_typed.pb"], []),
        "infer_raw.h2": client_connection(
            infer, messages["bench_raw.pb"], [("grpc-timeout", "5S")]
        ),
        "health.h2": client_connection("/grpc.health.v1.Health/Check", b"", []),
        "server_ready.h2": client_connection(
            "/inference.GRPCInferenceService/ServerReady", b"", []
        ),
        "metadata.h2": client_connection(
            "/inference.GRPCInferenceService/ModelMetadata", b"\x0a\x0dhalf_plus_two", []
        ),
    }


def hpack_blocks() -> dict[str, bytes]:
    from rosettaserve.transport.hpack import encode

    request = [(":method", "POST"), (":scheme", "http"), (":path", "/a.B/C")]
    request += [(":authority", "localhost:8001"), ("content-type", "application/grpc")]
    request += [("te", "trailers"), ("user-agent", "grpc-python/1.73"), ("grpc-timeout", "5S")]
    encoder = hpack.Encoder()
    plain = hpack.Encoder()
    return {
        "grpc_request.hpack": frame_blocks([encoder.encode(request), encoder.encode(request)]),
        "not_huffman.hpack": frame_blocks([plain.encode(request, huffman=False)]),
        "ours.hpack": frame_blocks([encode(request)]),
        "table_size.hpack": frame_blocks([b"\x3f\xe1\x1f" + encoder.encode(request)]),
    }


def number_arrays() -> dict[str, bytes]:
    floats = bodies.tensor_for(spec.REST_SMALL).ravel()
    return {
        "floats.json": ("[" + ",".join(str(v) for v in floats) + "]").encode(),
        "doubles.json": json.dumps(floats.astype(np.float64).tolist()).encode(),
        "int64.json": json.dumps(EXTREMES_64["INT64"]).encode(),
        "uint64.json": json.dumps(EXTREMES_64["UINT64"]).encode(),
        "mixed.json": b" [ 0, -0, -0.0, 1e22, 1E-22, 12345678.87654321 ,3]\n",
        # Eisel-Lemire's edges: subnormals, float64's ends, beyond 19 digits, halfway (2^53 + 1)
        "keys.json": b'{"data": [1, 2.5, 3], "x": {"data" : [ -1.5,7 ]}, "data":[[1]], "data"]',
        "long_digits.json": b"[4.9e-324,2.2250738585072011e-308,1.7976931348623157e308,"
        b"1e-400,3.14159265358979323846264338327950288,0.000000000000000000001234567890123,"
        b"90071992547409930000001e-1,9007199254740993,12345678901234567890123.5,-0.0]",
    }


def tfserving_bodies() -> dict[str, bytes]:
    b64 = base64.b64encode(b"\x00\xffbytes").decode()
    return {
        "instances.json": b'{"instances": [1.0, 2.0, 5.0]}',
        "nonfinite.json": b'{"signature_name": "serving_default", '
        b'"instances": [NaN, -Infinity, Inf]}',
        "columns.json": json.dumps(
            {
                "inputs": {
                    "x": [1.5, -0.0],
                    "d": [[1e300, 5e-324]],
                    "n": [2**62],
                    "s": [{"b64": b64}],
                    "b": [True],
                }
            }
        ).encode(),
        "rows.json": json.dumps(
            {"instances": [{"x": 0.1, "d": [2.5], "n": -3, "s": "text", "b": False}]}
        ).encode(),
        "trailing.json": b'{"instances": [3.0]} trailing',
    }


def tensor_protos() -> dict[str, bytes]:
    """TensorProtos as tf.make_tensor_proto writes them: tensor_content, typed values, one
    value standing for a shape, strings."""
    from rosettaserve.protocols.tfserving import messages as tfpb
    from rosettaserve.protocols.tfserving import tensorproto

    def typed(dtype: int, dims: list[int], **values: list[Any]) -> bytes:
        proto = tfpb.TensorProto(dtype=dtype, **values)
        proto.tensor_shape.dim.extend(tfpb.TensorShapeProto.Dim(size=d) for d in dims)
        return proto.SerializeToString()

    fp32 = np.array([[1.5, -0.0, np.inf]], dtype=np.float32)
    return {
        "content_fp32.pb": tensorproto.make(fp32, "FP32").SerializeToString(),
        "content_bf16.pb": tensorproto.make(
            fp32.astype(ml_dtypes.bfloat16), "BF16"
        ).SerializeToString(),
        "content_bool.pb": tensorproto.make(np.array([True, False]), "BOOL").SerializeToString(),
        "strings.pb": typed(tfpb.DT_STRING, [2], string_val=[b"a", b"\x00\xff"]),
        "one_float.pb": typed(tfpb.DT_FLOAT, [2, 3], float_val=[5.0]),
        "int8_vals.pb": typed(tfpb.DT_INT8, [3], int_val=[-128, 127, 300]),
        "half_vals.pb": typed(tfpb.DT_HALF, [2], half_val=[0x3C00, 0xFC00]),
        "uint64_vals.pb": typed(tfpb.DT_UINT64, [1], uint64_val=[2**64 - 1]),
        "no_values.pb": typed(tfpb.DT_INT64, [2, 2]),
    }


def predict_requests() -> dict[str, bytes]:
    """Predict requests as tensorflow-serving-api's users send them (tensor_content), and with
    typed values, a version or a label, and an output filter."""
    from rosettaserve.protocols.tfserving import messages as tfpb

    protos = tensor_protos()

    def request(inputs: dict[str, str], **spec: Any) -> bytes:
        made = tfpb.PredictRequest(model_spec={"name": "m", **spec})
        for alias, seed in inputs.items():
            made.inputs[alias].ParseFromString(protos[seed])
        return made.SerializeToString()

    return {
        "content.pb": request({"x": "content_fp32.pb"}),
        "two_inputs.pb": request(
            {"x": "content_bool.pb", "y": "content_bf16.pb"}, version={"value": 2}
        ),
        "typed.pb": request({"x": "one_float.pb"}, version_label="canary"),
        "filtered.pb": request({"x": "content_fp32.pb"}, signature_name="s") + b"\x1a\x01y",
    }


def grps_bodies() -> dict[str, bytes]:
    gtensors = {
        "tensors": [
            {"name": "x", "dtype": "DT_FLOAT32", "shape": [1, 4], "flat_float32": [1, 2, 3, 4]},
            {"name": "s", "dtype": "DT_STRING", "shape": [1], "flat_string": ["a"]},
        ]
    }
    return {
        "str_data.json": b'{"str_data": "hello"}',
        "ndarray.json": b'{"ndarray": [[1.0, 2.5], [3, 4]]}',
        "gtensors.json": json.dumps({"gtensors": gtensors}).encode(),
        "gmap.json": json.dumps({"gmap": {"s_s": {"k": "v"}, "s_b": {"k": "dmFsdWU="}}}).encode(),
        "gobject.json": b'{"gobject": {"a": [1, "b", null]}, "bin_data": "AAE="}',
    }


def sampling_requests() -> dict[str, bytes]:
    """``family\n<body>`` (targets/llm_sampling.py): each family's sampling fields at the
    values that once failed a batch, at their ranges' ends, and as clients send them."""
    tiny = {"temperature": 1e-300, "top_p": 1e-300, "repetition_penalty": 1e-300}
    edges = {"temperature": 1e-5, "top_p": 5e-324, "top_k": 2**63, "seed": 2**63 - 1}
    edges |= {"presence_penalty": -2.0, "frequency_penalty": 2.0, "repetition_penalty": 100}
    usual = {"temperature": 0.7, "top_p": 0.9, "top_k": 40, "seed": 1, "max_tokens": 16}
    docs = {"tiny": tiny, "edges": edges, "usual": usual}
    seeds = {}
    for family in ("openai-chat", "openai-completions", "vllm", "oip"):
        for name, doc in docs.items():
            seeds[f"{family}_{name}.txt"] = family.encode() + b"\n" + json.dumps(doc).encode()
    for family in ("tgi", "triton", "mindie"):
        for name, doc in docs.items():
            body = json.dumps({**doc, "do_sample": True, "top_n_tokens": 2}).encode()
            seeds[f"{family}_{name}.txt"] = family.encode() + b"\n" + body
    seeds["oip_nonfinite.txt"] = b'oip\n{"temperature": NaN, "top_k": Infinity, "seed": -0.0}'
    seeds["vllm_n.txt"] = b'vllm\n{"n": 2, "best_of": 2, "logprobs": 1e308, "min_p": 0.0}'
    return seeds


def openai_bodies() -> dict[str, bytes]:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    chat = {"model": "tiny_llama", "messages": messages, "max_tokens": 8, "temperature": 0}
    docs: dict[str, Any] = {
        "chat.json": chat,
        "chat_kwargs.json": {**chat, "chat_template_kwargs": {"enable_thinking": False,
                                                              "add_generation_prompt": False}},
        "chat_fields.json": {**chat, "add_generation_prompt": False, "continue_final_message": True,
                             "documents": [{"title": "a", "text": "b"}],
                             "add_special_tokens": True},
        "chat_template.json": {**chat, "chat_template": "{{ messages[0]['content'] }}"},
        "chat_logprobs.json": {**chat, "logprobs": True, "top_logprobs": 2, "prompt_logprobs": 1,
                               "stream": False, "n": 2, "best_of": 2},
        "chat_neutral.json": {**chat, "tools": [], "tool_choice": "none", "priority": 0,
                              "response_format": {"type": "text"}, "modalities": ["text"]},
        "completion.json": {"model": "tiny_llama", "prompt": "The quick brown", "max_tokens": 4,
                            "echo": True, "logprobs": 1, "prompt_logprobs": 0,
                            "stop": ["."], "skip_special_tokens": False,
                            "spaces_between_special_tokens": True},
        "completion_ids.json": {"model": "tiny_llama", "prompt": [1, 2, 3], "stream": True,
                                "stream_options": {"include_usage": True}},
        "vllm_simple.json": {"prompt": "Once", "max_tokens": 4, "prompt_logprobs": 2,
                             "logprobs": 1, "spaces_between_special_tokens": False},
    }  # fmt: skip
    return {name: json.dumps(doc).encode() for name, doc in docs.items()}


def pd_scheduler_inputs() -> dict[str, bytes]:
    """What the PD scheduler reads: /dresult streams, /v1/status documents (as our instances
    and MindIE's write them), client bodies and header blocks, coded replies (first byte: the
    coding, tests/fuzz/targets/pd_scheduler.py)."""
    import gzip
    import zlib

    from rosettaserve.pd import wire

    frames = wire.frame("12", wire.DATA, b'data: {"text": "a"}\n\n') + wire.KEEPALIVE
    frames += wire.frame("12", wire.LAST, b'{"text":["b"]}') + b"\0" + wire.close_frame()
    frames += wire.frame("13", wire.ERROR, b"Pull kv failed.") + wire.frame("14", wire.RETRY, b"{}")
    service = {"roleStatus": "RoleReady", "currentRole": "decode"}
    ours = {"service": service, "resource": {"runningRequestNum": 2, "kvTokensInUse": 40},
            "models": {"tiny_llama": {"1": "READY", "2": "LOADING"}}}  # fmt: skip
    mindie = {"service": {"roleStatus": "RoleUnknown", "currentRole": "prefill"},
              "resource": {"availSlotsNum": 200, "freeNpuBlockNums": 10},
              "linkStatus": {"peers": [{"target": 1, "link": "ok"}]}}  # fmt: skip
    held = base64.b64encode(bytes(range(36))).decode()  # 3 hashes (pd/prefix_report.py)
    prefill = {"service": {"roleStatus": "RoleReady", "currentRole": "prefill"},
               "prefill": {"leases": 0, "prefixBlocks": held}}  # fmt: skip
    body = b'{"model": "tiny_llama", "prompt": "hi", "max_tokens": 4}'
    return {
        "dresult.bin": frames,
        "status_ours.json": json.dumps(ours).encode(),
        "status_prefill.json": json.dumps(prefill).encode(),
        "status_mindie.json": json.dumps(mindie).encode(),
        "body.json": body,
        "headers.txt": b"connection: keep-alive, x-hop\nx-hop: 1\ncontent-encoding: gzip\n"
        b"accept-encoding: gzip, br\nreq-id: 7\nx-trace: t\nte: trailers",
        "reply_gzip.bin": b"\0" + gzip.compress(body),  # 0: gzip (CODINGS' order)
        "reply_deflate.bin": b"\1" + zlib.compress(body),
    }


def coded_bodies(infer: bytes) -> dict[str, bytes]:
    """Bodies for content_coding: its first byte picks the coding (targets/content_coding.py)."""
    from tests.fuzz.targets.content_coding import CODINGS

    def pick(encoding: str) -> bytes:
        return bytes((CODINGS.index(encoding),))

    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    zeros = b"\0" * (1 << 20)  # a bomb: past the target's limit, from a few hundred bytes
    return {
        "gzip.bin": pick("gzip") + gzip.compress(infer),
        "deflate_zlib.bin": pick("deflate") + zlib.compress(infer),
        "deflate_raw.bin": pick("deflate") + raw.compress(infer) + raw.flush(),
        "gzip_gzip.bin": pick("gzip, gzip") + gzip.compress(gzip.compress(infer)),
        "deflate_then_gzip.bin": pick("deflate, gzip") + gzip.compress(zlib.compress(infer)),
        "bomb_gzip_gzip.bin": pick("gzip, gzip") + gzip.compress(gzip.compress(zeros, 9), 9),
        "past_the_budget.bin": pick("gzip") + gzip.compress(bytes(range(256)) * 12),
        "three_codings.bin": pick("gzip, gzip, gzip") + gzip.compress(gzip.compress(infer)),
        "identity.bin": pick("identity") + infer,
        "junk_after.bin": pick("gzip") + gzip.compress(infer) + b"junk",
    }


def write(target: str, seeds: dict[str, bytes]) -> None:
    folder = HERE / "corpus" / target
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name, data in seeds.items():
        assert len(data) <= MAX_SEED, (target, name, len(data))
        (folder / name).write_bytes(data)


def pd_handovers() -> dict[str, bytes]:
    """What a scheduler sends a prefill instance (its PD headers) and what a prefill instance
    sends a decode instance (a hand-over's body), as pd/prefill.py writes them."""
    from rosettaserve.core.share import Share
    from rosettaserve.pd import wire

    key = "Zx9_-" * 5
    headers = wire.prefill_headers("12345678901234", "10.0.0.4", 8000, False, key)
    head = "\n".join(f"{k}: {v}" for k, v in headers.items()).encode()
    delta = {"text": " the", "ids": [278], "special": [False], "logprobs": None}
    logprobs = {**delta, "logprobs": [[278, " the", -0.5, [[278, " the", -0.5], [1, "a", -2.0]]]]}
    body = {"reqId": "12345678901234", "jobKey": key, "pNodeAddr": "10.0.0.3;8000",
            "path": "/v1/chat/completions", "body": '{"model": "m", "messages": []}',
            "promptIds": [1, 450, 278], "deltas": [delta], "seed": 7,
            "samplerState": base64.b64encode(b"\x01\x02").decode(), "kvTokens": 3,
            "kvBytes": 1536, "identity": {"id": "chatcmpl-1", "created": 1}}  # fmt: skip
    named = {**body, "pNodeAddr": "prefill-a;8000", "deltas": [logprobs], "kvBytes": 0}
    v6 = {**body, "pNodeAddr": "[::ffff:10.0.0.3];8000", "samplerState": None}
    ((name, value),) = wire.tenant_header(Share("key#2", 2.5, 0)).items()  # (pd-tenant)
    tenant = head + f"\n{name}: {value}".encode()
    tenant_body = {**body, "tenant": "key#2", "weight": 2.5, "priority": -3}
    return {
        "handover.txt": head + b"\n\n" + json.dumps(body).encode(),
        "handover_named.txt": head.replace(b"false", b"true")
        + b"\n\n"
        + json.dumps(named).encode(),
        "handover_v6.txt": b"req-id: 1\nreq-type: prefill\nd-target: 10.0.0.4\nd-port: 1\n\n"
        + json.dumps(v6).encode(),
        "handover_tenant.txt": tenant + b"\n\n" + json.dumps(tenant_body).encode(),
    }


def main() -> None:
    oip = oip_bodies()
    messages = grpc_messages()
    corpora: dict[str, dict[str, Any]] = {
        "oip_rest": oip,
        "h1_connection": http_requests(oip["bench_rest_small.json"], oip["bulk_fp32.json"]),
        "grpc_wire": messages,
        "h2_frames": h2_connections(messages),
        "hpack_decoder": hpack_blocks(),
        "json_numbers": number_arrays(),
        "tfserving_json": tfserving_bodies(),
        "grps_json": grps_bodies(),
        "tfserving_tensorproto": tensor_protos(),
        "tfserving_predict": predict_requests(),
        "llm_sampling": sampling_requests(),
        "openai_request": openai_bodies(),
        "pd_scheduler": pd_scheduler_inputs(),
        "pd_handover": pd_handovers(),
        "content_coding": coded_bodies(oip["bench_rest_small.json"]),
    }
    for target, seeds in corpora.items():
        write(target, seeds)


if __name__ == "__main__":
    main()
