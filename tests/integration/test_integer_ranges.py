"""An integer a tensor's datatype cannot hold (2**63 as INT64, -1 as UINT64, a literal past 64
bits, 128 as INT8) is a 400 naming the tensor, the value and the datatype's range, on OIP REST
(short lists and the bulk readers of long ones), TF Serving REST (rows and columns) and grps REST;
never a silent wrap-around, never a 500. The largest and smallest values that fit are served."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.serverproc import ServerProcess

TIMEOUT_S = 30.0
RANGES = {
    "INT8": (-(2**7), 2**7 - 1),
    "UINT8": (0, 2**8 - 1),
    "INT16": (-(2**15), 2**15 - 1),
    "INT32": (-(2**31), 2**31 - 1),
    "INT64": (-(2**63), 2**63 - 1),
    "UINT64": (0, 2**64 - 1),
}
# (datatype, value, how the message shows the value: a literal past 64 bits is read as a float)
BEYOND = [
    ("INT64", 2**63, "9223372036854775808"),
    ("INT64", -(2**63) - 1, "-9.223372036854776e+18"),
    ("INT64", 10**30, "1e+30"),
    ("UINT64", -1, "-1"),
    ("UINT64", 2**64, "1.8446744073709552e+19"),
    ("INT32", 2**31, "2147483648"),
    ("INT32", -(2**31) - 1, "-2147483649"),
    ("INT8", 128, "128"),
    ("UINT8", -1, "-1"),
    ("INT16", 2**15, "32768"),
]
GRPS_FIELDS = {"INT8": "flat_int8", "UINT8": "flat_uint8", "INT16": "flat_int16"}
GRPS_FIELDS |= {"INT32": "flat_int32", "INT64": "flat_int64"}


def expected(datatype: str, shown: str) -> str:
    low, high = RANGES[datatype]
    return f"tensor 'INPUT0' holds {shown}, which is outside the {datatype} range [{low}, {high}]"


def post(server: ServerProcess, path: str, body: object) -> httpx.Response:
    # json.dumps writes integers of any size as they are (orjson refuses those past 64 bits)
    headers = {"content-type": "application/json"}
    url = server.http_url + path
    return httpx.post(url, content=json.dumps(body), headers=headers, timeout=TIMEOUT_S)


def oip(server: ServerProcess, datatype: str, data: list[int]) -> httpx.Response:
    tensor = {"name": "INPUT0", "datatype": datatype, "shape": [1, len(data)], "data": data}
    return post(server, f"/v2/models/identity_{datatype.lower()}/infer", {"inputs": [tensor]})


@pytest.mark.parametrize("count", [2, 300, 20_000])  # the short path, then the bulk readers
@pytest.mark.parametrize(("datatype", "value", "shown"), BEYOND, ids=str)
def test_oip_rest(server: ServerProcess, count: int, datatype: str, value: int, shown: str) -> None:
    answer = oip(server, datatype, [1] * (count - 1) + [value])
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == expected(datatype, shown)


@pytest.mark.parametrize(("datatype", "value", "shown"), BEYOND, ids=str)
def test_tfserving_rest(server: ServerProcess, datatype: str, value: int, shown: str) -> None:
    path = f"/v1/models/identity_{datatype.lower()}:predict"
    for body in ({"instances": [[1, value]]}, {"inputs": {"INPUT0": [[1, value]]}}):
        answer = post(server, path, body)
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert f"is not of expected type: {datatype.lower()}" in error  # TF Serving's words
        assert error.endswith(f"({expected(datatype, shown)})"), error


GRPS_BEYOND = [row for row in BEYOND if row[0] in GRPS_FIELDS]  # grps has no UINT64 field


@pytest.mark.parametrize(("datatype", "value", "shown"), GRPS_BEYOND, ids=str)
def test_grps_rest(server: ServerProcess, datatype: str, value: int, shown: str) -> None:
    field = GRPS_FIELDS[datatype]
    model = "identity_" + datatype.lower()
    for written in (value, str(value)):  # protobuf's JSON takes integers in strings too
        tensor = {"name": "INPUT0", "dtype": f"DT_{datatype}", "shape": [1, 2], field: [1, written]}
        body = {"model": model, "gtensors": {"tensors": [tensor]}}
        answer = post(server, "/grps/v1/infer/predict", body)
        assert answer.status_code == 400, answer.text
        shown_here = shown if isinstance(written, int) else str(value)
        assert answer.json()["status"]["msg"] == expected(datatype, shown_here)


@pytest.mark.parametrize("datatype", sorted(RANGES))
def test_the_edges_of_each_range_are_served(server: ServerProcess, datatype: str) -> None:
    edges = list(RANGES[datatype])
    assert oip(server, datatype, edges).json()["outputs"][0]["data"] == edges
    path = f"/v1/models/identity_{datatype.lower()}:predict"
    assert post(server, path, {"instances": [edges]}).json()["predictions"] == [edges]
