"""System shared memory over gRPC, driven by ``tritonclient.grpc`` and
``tritonclient.utils.shared_memory`` against a real server process: the rpcs, inputs read from
regions (beside raw inputs), outputs written into them, and Triton's errors. The REST twin:
tests/integration/test_oip_shared_memory.py."""

from __future__ import annotations

import os
from base64 import b64encode
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm

from tests.serverproc import ServerProcess, served, start_server
from tests.shm_support import TENSOR_BYTES, A, B, Regions, key_path, make_repo, regions
from tests.tritonclient_common import expect_error

__all__ = ["regions"]  # the fixture, used by name
KEY = "shm-grpc-key"
AUTH = {"authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = make_repo(tmp_path_factory.mktemp("shm_repo"))
    yield from served(start_server(repo, "--api-key", KEY, "--allow-client-shm=true"))


@pytest.fixture
def client(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    c = grpcclient.InferenceServerClient(server.grpc_address)
    yield c
    c.unregister_system_shared_memory(headers=AUTH)
    c.close()


def register_io(client: grpcclient.InferenceServerClient, regions: Regions) -> tuple[str, object]:
    ins, in_key = regions.create("in", 2 * TENSOR_BYTES)
    shm.set_shared_memory_region(ins, [A, B])
    outs, out_key = regions.create("out", 2 * TENSOR_BYTES)
    client.register_system_shared_memory("in", in_key, 2 * TENSOR_BYTES, headers=AUTH)
    client.register_system_shared_memory("out", out_key, 2 * TENSOR_BYTES, headers=AUTH)
    return in_key, outs


def shm_inputs(offset1: int = TENSOR_BYTES) -> list[grpcclient.InferInput]:
    i0 = grpcclient.InferInput("INPUT0", [1, 16], "INT32")
    i0.set_shared_memory("in", TENSOR_BYTES)
    i1 = grpcclient.InferInput("INPUT1", [1, 16], "INT32")
    i1.set_shared_memory("in", TENSOR_BYTES, offset=offset1)
    return [i0, i1]


def shm_outputs(size: int = TENSOR_BYTES) -> list[grpcclient.InferRequestedOutput]:
    o0 = grpcclient.InferRequestedOutput("OUTPUT0")
    o0.set_shared_memory("out", size)
    o1 = grpcclient.InferRequestedOutput("OUTPUT1")
    o1.set_shared_memory("out", size, offset=TENSOR_BYTES)
    return [o0, o1]


def test_inputs_and_outputs_in_shared_memory(
    client: grpcclient.InferenceServerClient, regions: Regions
) -> None:
    _, outs = register_io(client, regions)
    result = client.infer("simple", shm_inputs(), outputs=shm_outputs(), headers=AUTH)
    out0 = result.get_output("OUTPUT0")
    assert (out0.name, out0.datatype, list(out0.shape)) == ("OUTPUT0", "INT32", [1, 16])
    assert result.get_response().raw_output_contents == [b"", b""]  # no data, as Triton
    np.testing.assert_array_equal(shm.get_contents_as_numpy(outs, np.int32, [1, 16]), A + B)
    got = shm.get_contents_as_numpy(outs, np.int32, [1, 16], offset=TENSOR_BYTES)
    np.testing.assert_array_equal(got, A - B)


def test_a_shared_input_beside_a_raw_one(
    client: grpcclient.InferenceServerClient, regions: Regions
) -> None:
    """raw_input_contents holds buffers for the inputs not in shared memory only."""
    register_io(client, regions)
    i0 = grpcclient.InferInput("INPUT0", [1, 16], "INT32")
    i0.set_data_from_numpy(A)
    i1 = shm_inputs()[1]
    out = grpcclient.InferRequestedOutput("OUTPUT1")
    result = client.infer("simple", [i0, i1], outputs=[out], headers=AUTH)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


def test_streaming_writes_outputs_too(
    client: grpcclient.InferenceServerClient, regions: Regions
) -> None:
    _, outs = register_io(client, regions)
    answers: list[object] = []
    client.start_stream(lambda result, error: answers.append(error or result), headers=AUTH)
    client.async_stream_infer("simple", shm_inputs(), outputs=shm_outputs())
    client.stop_stream()
    assert len(answers) == 1, answers
    assert isinstance(answers[0], grpcclient.InferResult), answers
    np.testing.assert_array_equal(shm.get_contents_as_numpy(outs, np.int32, [1, 16]), A + B)


def test_status_register_unregister(
    client: grpcclient.InferenceServerClient, regions: Regions
) -> None:
    in_key, _ = register_io(client, regions)
    status = client.get_system_shared_memory_status(headers=AUTH)
    assert sorted(status.regions) == ["in", "out"]
    region = status.regions["in"]
    assert (region.name, region.key, region.offset, region.byte_size) == (
        "in",
        in_key,
        0,
        2 * TENSOR_BYTES,
    )
    expect_error(
        lambda: client.register_system_shared_memory("in", in_key, 8, headers=AUTH),
        "StatusCode.ALREADY_EXISTS",
        "shared memory region 'in' already in manager",
    )
    client.unregister_system_shared_memory("in", headers=AUTH)
    expect_error(
        lambda: client.get_system_shared_memory_status("in", headers=AUTH),
        "StatusCode.NOT_FOUND",
        "Unable to find system shared memory region: 'in'",
    )
    client.unregister_system_shared_memory(headers=AUTH)
    assert not client.get_system_shared_memory_status(headers=AUTH).regions


def test_rpcs_need_the_api_key(client: grpcclient.InferenceServerClient) -> None:
    expect_error(client.get_system_shared_memory_status, "StatusCode.UNAUTHENTICATED")
    expect_error(
        lambda: client.register_system_shared_memory("x", "/x", 8),
        "StatusCode.UNAUTHENTICATED",
    )


def test_infer_errors(client: grpcclient.InferenceServerClient, regions: Regions) -> None:
    in_key, _ = register_io(client, regions)

    def infer(inputs: list[grpcclient.InferInput], outputs: object = None) -> None:
        client.infer("simple", inputs, outputs=outputs, headers=AUTH)  # type: ignore[arg-type]

    unknown = shm_inputs()
    unknown[0].set_shared_memory("nope", TENSOR_BYTES)
    expect_error(
        lambda: infer(unknown), "StatusCode.NOT_FOUND", "Unable to find shared memory region"
    )
    past = shm_inputs(offset1=2 * TENSOR_BYTES)
    expect_error(
        lambda: infer(past), "StatusCode.INVALID_ARGUMENT", "Invalid offset for shared memory"
    )
    lied = shm_inputs(offset1=TENSOR_BYTES + 1)
    expect_error(lambda: infer(lied), "StatusCode.INVALID_ARGUMENT", "Invalid offset + byte size")
    big = shm_inputs()
    big[0].set_shared_memory("in", 2 * TENSOR_BYTES)
    expect_error(lambda: infer(big), "StatusCode.INVALID_ARGUMENT", "needs 64 bytes, but 128")
    expect_error(
        lambda: infer(shm_inputs(), shm_outputs(size=8)),
        "StatusCode.INVALID_ARGUMENT",
        "for output 'OUTPUT0' (8 bytes) should be at least 64 bytes",
    )
    os.truncate(key_path(in_key), 16)  # the client shrinks its object after register
    expect_error(lambda: infer(shm_inputs()), "StatusCode.INVALID_ARGUMENT", "is smaller than when")
    assert client.is_server_live()


def test_cuda_shared_memory_answers_that_there_is_no_gpu(
    client: grpcclient.InferenceServerClient,
) -> None:
    assert not client.get_cuda_shared_memory_status(headers=AUTH).regions
    expect_error(
        lambda: client.register_cuda_shared_memory("g", b64encode(b"handle"), 0, 64, headers=AUTH),
        "StatusCode.UNIMPLEMENTED",
        "CUDA shared memory is not supported",
    )
    # nothing to unregister, all or by name: done, as Triton answers it (perf_analyzer
    # --shared-memory system unregisters every CUDA region too when it ends)
    client.unregister_cuda_shared_memory(headers=AUTH)
    client.unregister_cuda_shared_memory("g", headers=AUTH)


def test_classification_answers_score_index_label(
    client: grpcclient.InferenceServerClient,
) -> None:
    x = np.array([[0.1, 0.7, 0.05, 0.15]], dtype=np.float32)
    inp = grpcclient.InferInput("X", [1, 4], "FP32")
    inp.set_data_from_numpy(x)
    out = grpcclient.InferRequestedOutput("SCORES", class_count=3)
    result = client.infer("scores", [inp], outputs=[out], headers=AUTH)
    assert result.get_output("SCORES").datatype == "BYTES"
    got = [s.decode() for s in result.as_numpy("SCORES").ravel()]
    assert got == ["0.700000:1:dog", "0.150000:3", "0.100000:0:cat"]
