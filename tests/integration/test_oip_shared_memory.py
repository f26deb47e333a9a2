"""System shared memory over REST, driven by ``tritonclient.http`` and
``tritonclient.utils.shared_memory`` against a real server process: register, status,
unregister, inputs read from regions (JSON and binary requests), outputs written into them, and
the errors Triton answers (unknown regions, offsets and sizes past a region, sizes that do not
match the tensor, regions that lie about their size). The gRPC twin: tests_tritongrpc."""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import serialize_byte_tensor

from tests.serverproc import ServerProcess, served, start_server
from tests.shm_support import TENSOR_BYTES, A, B, Regions, key_path, make_repo, regions
from tests.tritonclient_common import expect_error

__all__ = ["regions"]  # the fixture, used by name
KEY = "shm-test-key"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = make_repo(tmp_path_factory.mktemp("shm_repo"))
    yield from served(start_server(repo, "--api-key", KEY, "--allow-client-shm"))


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(server.http_hostport)
    yield c
    c.unregister_system_shared_memory(headers=auth())
    c.close()


AUTH: dict[str, str] = {"Authorization": f"Bearer {KEY}"}


def auth() -> dict[str, str]:
    """The key's header, a dict of its own each call: tritonclient adds its own headers to the
    dict it is given."""
    return dict(AUTH)


def register_io(
    client: httpclient.InferenceServerClient, regions: Regions
) -> tuple[str, str, object]:
    """One input region holding A then B, one output region for both outputs."""
    ins, in_key = regions.create("in", 2 * TENSOR_BYTES)
    shm.set_shared_memory_region(ins, [A, B])
    outs, out_key = regions.create("out", 2 * TENSOR_BYTES)
    client.register_system_shared_memory("in", in_key, 2 * TENSOR_BYTES, headers=auth())
    client.register_system_shared_memory("out", out_key, 2 * TENSOR_BYTES, headers=auth())
    return in_key, out_key, outs


def shm_inputs(offset1: int = TENSOR_BYTES) -> list[httpclient.InferInput]:
    i0 = httpclient.InferInput("INPUT0", [1, 16], "INT32")
    i0.set_shared_memory("in", TENSOR_BYTES)
    i1 = httpclient.InferInput("INPUT1", [1, 16], "INT32")
    i1.set_shared_memory("in", TENSOR_BYTES, offset=offset1)
    return [i0, i1]


def shm_outputs(size: int = TENSOR_BYTES) -> list[httpclient.InferRequestedOutput]:
    o0 = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
    o0.set_shared_memory("out", size)
    o1 = httpclient.InferRequestedOutput("OUTPUT1", binary_data=True)
    o1.set_shared_memory("out", size, offset=TENSOR_BYTES)
    return [o0, o1]


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_inputs_and_outputs_in_shared_memory(
    client: httpclient.InferenceServerClient, regions: Regions, binary: bool
) -> None:
    _, _, outs = register_io(client, regions)
    outputs = shm_outputs()
    if not binary:  # the second output as JSON beside one in shared memory
        outputs[1] = httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)
    result = client.infer("simple", shm_inputs(), outputs=outputs, headers=auth())
    out0 = result.get_output("OUTPUT0")
    assert out0 == {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16]}  # no data
    np.testing.assert_array_equal(shm.get_contents_as_numpy(outs, np.int32, [1, 16]), A + B)
    if binary:
        got = shm.get_contents_as_numpy(outs, np.int32, [1, 16], offset=TENSOR_BYTES)
    else:
        got = result.as_numpy("OUTPUT1")
    np.testing.assert_array_equal(got, A - B)


def test_a_shared_input_beside_a_sent_one(
    client: httpclient.InferenceServerClient, regions: Regions
) -> None:
    register_io(client, regions)
    i0 = shm_inputs()[0]
    i1 = httpclient.InferInput("INPUT1", [1, 16], "INT32")
    i1.set_data_from_numpy(B, binary_data=True)
    result = client.infer("simple", [i0, i1], headers=auth())
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)


def test_bytes_tensor_through_shared_memory(
    client: httpclient.InferenceServerClient, regions: Regions
) -> None:
    text = np.array([b"hello", b"shared \xc3\xa9"], dtype=object)
    serialized = serialize_byte_tensor(text)
    size = len(serialized.item())
    handle, key = regions.create("text", 256)
    shm.set_shared_memory_region(handle, [serialized])
    client.register_system_shared_memory("text", key, 256, headers=auth())
    inp = httpclient.InferInput("TEXT", [2], "BYTES")
    inp.set_shared_memory("text", size)
    out = httpclient.InferRequestedOutput("UPPER", binary_data=True)
    out.set_shared_memory("text", 128, offset=128)
    client.infer("text_python", [inp], outputs=[out], headers=auth())
    got = shm.get_contents_as_numpy(handle, np.object_, [2], offset=128)
    assert list(got) == [b"HELLO", "SHARED É".encode()]


def test_status_register_unregister(
    client: httpclient.InferenceServerClient, regions: Regions
) -> None:
    in_key, out_key, _ = register_io(client, regions)
    status = client.get_system_shared_memory_status(headers=auth())
    assert sorted(status, key=lambda r: r["name"]) == [
        {"name": "in", "key": in_key, "offset": 0, "byte_size": 2 * TENSOR_BYTES},
        {"name": "out", "key": out_key, "offset": 0, "byte_size": 2 * TENSOR_BYTES},
    ]
    assert client.get_system_shared_memory_status("in", headers=auth())[0]["key"] == in_key
    expect_error(
        lambda: client.register_system_shared_memory("in", in_key, 8, headers=auth()),
        "409",
        "shared memory region 'in' already in manager",
    )
    client.unregister_system_shared_memory("in", headers=auth())
    client.unregister_system_shared_memory("never-registered", headers=auth())  # no error
    assert [r["name"] for r in client.get_system_shared_memory_status(headers=auth())] == ["out"]
    expect_error(
        lambda: client.get_system_shared_memory_status("in", headers=auth()),
        "404",
        "Unable to find system shared memory region: 'in'",
    )
    client.unregister_system_shared_memory(headers=auth())
    assert client.get_system_shared_memory_status(headers=auth()) == []
    extensions = client.get_server_metadata(headers=auth())["extensions"]
    assert {"system_shared_memory", "classification"} <= set(extensions)


def test_registration_needs_the_api_key(server: ServerProcess, regions: Regions) -> None:
    _, key = regions.create("keyed", 64)
    body = {"key": key, "offset": 0, "byte_size": 64}
    url = f"{server.http_url}/v2/systemsharedmemory/region/keyed/register"
    assert httpx.post(url, json=body).status_code == 401
    assert httpx.get(f"{server.http_url}/v2/systemsharedmemory/status").status_code == 401
    assert httpx.post(url, json=body, headers=auth()).status_code == 200
    httpx.post(f"{server.http_url}/v2/systemsharedmemory/unregister", headers=auth())


def test_register_errors(client: httpclient.InferenceServerClient, regions: Regions) -> None:
    _, key = regions.create("small", 64)
    for offset, size in ((0, 65), (1, 64), (64, 1), (65, 0)):  # past the object's end
        expect_error(
            lambda o=offset, s=size: client.register_system_shared_memory(  # type: ignore[misc]
                "small", key, s, offset=o, headers=auth()
            ),
            "400",
            "failed to register shared memory region 'small': invalid args",
        )
    for bad in ("/", "///", "/../etc/passwd", "/a/b"):
        expect_error(
            lambda k=bad: client.register_system_shared_memory("x", k, 8, headers=auth()),  # type: ignore[misc]
            "400",
            f"cannot register shared memory region 'x' - invalid shm key '{bad}'",
        )
    expect_error(
        lambda: client.register_system_shared_memory("x", "/rs-no-such-object", 8, headers=auth()),
        "400",
        "Unable to open shared memory region: '/rs-no-such-object'",
    )
    reserved = "/triton_python_backend_shm_region_1"
    expect_error(
        lambda: client.register_system_shared_memory("x", reserved, 8, headers=auth()),
        "400",
        "contains the reserved prefix",
    )
    assert client.get_system_shared_memory_status(headers=auth()) == []


def test_infer_errors(client: httpclient.InferenceServerClient, regions: Regions) -> None:
    register_io(client, regions)

    def infer(inputs: list[httpclient.InferInput], outputs: object = None) -> None:
        client.infer("simple", inputs, outputs=outputs, headers=auth())  # type: ignore[arg-type]

    unknown = shm_inputs()
    unknown[0].set_shared_memory("nope", TENSOR_BYTES)
    expect_error(lambda: infer(unknown), "404", "Unable to find shared memory region: 'nope'")
    past = shm_inputs(offset1=2 * TENSOR_BYTES)  # offset at the region's end
    expect_error(lambda: infer(past), "400", "Invalid offset for shared memory region: 'in'")
    lied = shm_inputs(offset1=TENSOR_BYTES + 1)  # 64 bytes from 65: one past the end
    expect_error(lambda: infer(lied), "400", "Invalid offset + byte size for shared memory")
    big = shm_inputs()
    big[0].set_shared_memory("in", 2 * TENSOR_BYTES)  # fits the region, not the tensor
    expect_error(lambda: infer(big), "400", "needs 64 bytes, but 128 were sent")
    small = shm_outputs(size=TENSOR_BYTES - 4)
    expect_error(
        lambda: infer(shm_inputs(), small),
        "400",
        "shared memory size specified with the request for output 'OUTPUT0' (60 bytes) "
        "should be at least 64 bytes to hold the results",
    )


def test_data_and_region_both(server: ServerProcess, regions: Regions) -> None:
    _, key = regions.create("both", 64)
    with httpx.Client(base_url=server.http_url, headers=auth()) as http:
        http.post("/v2/systemsharedmemory/region/both/register", json={"key": key, "byte_size": 64})
        shared = {"shared_memory_region": "both", "shared_memory_byte_size": 64}
        body = {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "INT32",
                    "shape": [1, 16],
                    "data": [0] * 16,
                    "parameters": shared,
                },
                {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "parameters": shared},
            ]
        }
        reply = http.post("/v2/models/simple/infer", json=body)
        assert reply.status_code == 400
        assert "But set 'data' 'shared_memory_region'" in reply.json()["error"]
        body["inputs"][0] = {**body["inputs"][1], "name": "INPUT0"}  # type: ignore[index]
        body["outputs"] = [  # type: ignore[assignment]
            {"name": "OUTPUT0", "parameters": {**shared, "binary_data": True}}
        ]
        reply = http.post("/v2/models/simple/infer", json=body)
        assert reply.status_code == 400
        assert "can't set both 'shared_memory_region' and 'binary_data'" in reply.json()["error"]
        http.post("/v2/systemsharedmemory/unregister")


def test_a_region_shrunk_after_register(
    client: httpclient.InferenceServerClient, regions: Regions
) -> None:
    """A hostile client registers its object, then truncates it: the server checks the object's
    size at each request and answers an error (a read past a shrunk object would fault)."""
    in_key, _, _ = register_io(client, regions)
    os.truncate(key_path(in_key), 16)
    expect_error(
        lambda: client.infer("simple", shm_inputs(), headers=auth()),
        "400",
        "shared memory region 'in' is smaller than when it was registered",
    )
    assert client.is_server_live()


def test_unregister_keeps_the_region_for_later_requests_out(
    client: httpclient.InferenceServerClient, regions: Regions
) -> None:
    register_io(client, regions)
    client.unregister_system_shared_memory("in", headers=auth())
    expect_error(
        lambda: client.infer("simple", shm_inputs(), headers=auth()),
        "404",
        "Unable to find shared memory region: 'in'",
    )


def test_cuda_shared_memory_answers_that_there_is_no_gpu(
    client: httpclient.InferenceServerClient,
) -> None:
    assert client.get_cuda_shared_memory_status(headers=auth()) == []
    expect_error(
        lambda: client.register_cuda_shared_memory("g", b"handle", 0, 64, headers=auth()),
        "501",
        "CUDA shared memory is not supported",
    )
    # nothing to unregister, all or by name: done, as Triton answers it (perf_analyzer
    # --shared-memory system unregisters every CUDA region too when it ends)
    client.unregister_cuda_shared_memory(headers=auth())
    client.unregister_cuda_shared_memory("g", headers=auth())


# -- the classification extension (tritonclient's class_count) ---------------------------------

X = np.array([[0.1, 0.7, 0.05, 0.15], [0.9, 0.0, 0.0, 0.1]], dtype=np.float32)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_classification_answers_score_index_label(
    client: httpclient.InferenceServerClient, binary: bool
) -> None:
    inp = httpclient.InferInput("X", [2, 4], "FP32")
    inp.set_data_from_numpy(X, binary_data=binary)
    out = httpclient.InferRequestedOutput("SCORES", binary_data=binary, class_count=2)
    result = client.infer("scores", [inp], outputs=[out], headers=auth())
    meta = result.get_output("SCORES")
    assert (meta["datatype"], meta["shape"]) == ("BYTES", [2, 2])  # a row per batch entry
    got = [
        [s.decode() if isinstance(s, bytes) else s for s in row]
        for row in result.as_numpy("SCORES")
    ]
    # labels.txt names classes 0-2 only: class 3 is "score:index"
    assert got == [["0.700000:1:dog", "0.150000:3"], ["0.900000:0:cat", "0.100000:3"]]


def test_classification_of_integers_without_labels(
    client: httpclient.InferenceServerClient,
) -> None:
    i0 = httpclient.InferInput("INPUT0", [1, 16], "INT32")
    i0.set_data_from_numpy(A)
    i1 = httpclient.InferInput("INPUT1", [1, 16], "INT32")
    i1.set_data_from_numpy(B)
    out = httpclient.InferRequestedOutput("OUTPUT0", class_count=40)  # more than there are
    result = client.infer("simple", [i0, i1], outputs=[out], headers=auth())
    got = [s.decode() for s in result.as_numpy("OUTPUT0").ravel()]
    assert result.get_output("OUTPUT0")["shape"] == [16]  # the model does not batch
    assert got[:3] == ["18:15", "17:14", "16:13"]


def test_classification_errors(server: ServerProcess, regions: Regions) -> None:
    _, key = regions.create("cls", 64)
    body = {
        "inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}],
        "outputs": [{"name": "SCORES", "parameters": {"classification": -1}}],
    }
    with httpx.Client(base_url=server.http_url, headers=AUTH) as http:
        reply = http.post("/v2/models/scores/infer", json=body)
        assert reply.status_code == 400
        assert "invalid value for 'classification' parameter" in reply.json()["error"]
        http.post("/v2/systemsharedmemory/region/cls/register", json={"key": key, "byte_size": 64})
        shared = {"shared_memory_region": "cls", "shared_memory_byte_size": 16, "classification": 1}
        body["outputs"] = [{"name": "SCORES", "parameters": shared}]
        reply = http.post("/v2/models/scores/infer", json=body)
        assert reply.status_code == 400
        assert "can't set both 'shared_memory_region' and 'classification'" in reply.json()["error"]
        http.post("/v2/systemsharedmemory/unregister")
