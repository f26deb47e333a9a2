"""FP32 answers in JSON (written by core/json_floats.c) read back by tritonclient.http to the
very float32 values sent: random bit patterns, signed zeros, subnormals, the largest and
smallest values, NaN and the infinities, in an output large enough for the bulk writer."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.serverproc import ServerProcess

EDGES = [0.0, -0.0, 1e-45, -1e-45, 1.1754942e-38, 1.1754944e-38, 3.4028235e38, -3.4028235e38]


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(server.http_hostport, network_timeout=60.0)
    yield c
    c.close()


def values(count: int) -> np.ndarray:
    rng = np.random.default_rng(count)
    bits = rng.integers(0, 2**32, count, dtype=np.uint64).astype(np.uint32)
    data = bits.view(np.float32).copy()
    special = np.array([*EDGES, np.nan, np.inf, -np.inf], dtype=np.float32)
    data[: special.size] = special
    return data.reshape(1, count)


@pytest.mark.parametrize("count", [100, 65536])
def test_fp32_json_answer_reads_back_bit_for_bit(
    client: httpclient.InferenceServerClient, count: int
) -> None:
    data = values(count)
    inp = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
    inp.set_data_from_numpy(data, binary_data=False)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)
    result = client.infer("identity_fp32", [inp], outputs=[out])
    assert "data" in result.get_output("OUTPUT0")  # JSON, not a binary blob
    back = result.as_numpy("OUTPUT0")
    assert back.dtype == np.float32
    assert back.shape == data.shape
    finite = np.isfinite(data)
    assert np.array_equal(back[finite].view(np.uint32), data[finite].view(np.uint32))
    assert np.array_equal(np.isnan(back), np.isnan(data))
    assert np.array_equal(back[np.isinf(data)], data[np.isinf(data)])
