"""Shared by the grps integration tests: a client stub generated from our grps.proto, and an
HTTP/1.1 reader that keeps chunk boundaries (grps clients read one message per chunk)."""

from __future__ import annotations

import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from google.protobuf import json_format

from rosettaserve.protocols.grps.pb import grps_pb2 as pb
from tests.conftest import EXAMPLES, TEST_MODELS, add_identity_models, load_module
from tests.serverproc import ServerProcess, start_server

SRC = Path(__file__).resolve().parents[2] / "src"
PROTO = "rosettaserve/protocols/grps/pb/grps.proto"
DEFAULT_MODEL = "greeter_python"
TIMEOUT_S = 30.0
# the models these tests use (a repository of their own: other models cannot hold it not ready)
MODELS = [EXAMPLES / m for m in ("greeter_python", "words_stream_python", "text_python")]
MODELS += [EXAMPLES / m for m in ("versioned_python", "mlp_onnx")]
MODELS += [TEST_MODELS / m for m in ("grps_map_echo", "grps_faulty", "grps_faulty_stream")]


def start_grps_server(folder: Path) -> ServerProcess:
    """A server on a repository of MODELS plus identity_<dtype>, default model DEFAULT_MODEL."""
    for model in MODELS:
        shutil.copytree(model, folder / model.name, ignore=shutil.ignore_patterns("__pycache__"))
    add_identity_models(folder)
    return start_server(folder, "--grps-default-model", DEFAULT_MODEL)


def generate_stubs(out: Path) -> ModuleType:
    """grps_pb2_grpc (GrpsServiceStub) as grpcio-tools generates it from our proto, for tests."""
    from grpc_tools import protoc

    if protoc.main(["protoc", f"-I{SRC}", f"--grpc_python_out={out}", PROTO]) != 0:
        raise RuntimeError("protoc failed")
    path = out / PROTO.replace(".proto", "_pb2_grpc.py")
    return load_module("grps_pb2_grpc_for_tests", path)


def message(doc: dict[str, Any]) -> Any:
    return json_format.ParseDict(doc, pb.GrpsMessage(), ignore_unknown_fields=True)


def as_dict(msg: Any) -> dict[str, Any]:
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def status_of(doc: dict[str, Any]) -> tuple[int, str]:
    return doc["status"]["code"], doc["status"]["status"]


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    chunks: list[bytes] = field(default_factory=list)  # chunked: one item per chunk
    body: bytes = b""


def raw_post(http_url: str, path: str, body: bytes, content_type: str) -> RawResponse:
    """One POST over a fresh socket, reading the chunked framing as sent."""
    host, port = http_url.removeprefix("http://").rsplit(":", 1)
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: {content_type}\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        sock.sendall(head + body)
        reader = sock.makefile("rb")
        status = int(reader.readline().split()[1])
        headers = {}
        while (line := reader.readline().rstrip(b"\r\n")) != b"":
            name, value = line.decode().split(":", 1)
            headers[name.strip().lower()] = value.strip()
        response = RawResponse(status, headers)
        if headers.get("transfer-encoding") == "chunked":
            while (size := int(reader.readline().strip(), 16)) > 0:
                response.chunks.append(reader.read(size))
                assert reader.read(2) == b"\r\n"
        else:
            response.body = reader.read(int(headers["content-length"]))
    return response
