"""The response cache (hits and misses in the statistics extension), the configuration fields
that show it and an output's labels, and the trace and logging extensions' settings, on both
servers over REST and gRPC."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf.json_format import MessageToDict
from tritonclient.utils import InferenceServerException

from tests_triton.clients import PROTOCOLS, client, counted, infer, refused, stats, status_of
from tests_triton.servers import Peer


def cache_counts(server: Peer) -> dict[str, int]:
    inference = stats(server, "cached")["inference_stats"]
    return {kind: int(inference[kind]["count"]) for kind in ("cache_hit", "cache_miss", "success")}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_same_inputs_answer_from_the_cache(server: Peer, protocol: str) -> None:
    """cached answers its input and how many times it ran: the same input again is a hit (the
    earlier count, the model not run), another input a miss. Each counts in the statistics:
    a hit as cache_hit and a success, a miss as cache_miss and a success, on both."""
    x = np.array([1.0, 2.0, 3.0 if protocol == "http" else 4.0], np.float32)
    before = cache_counts(server)
    first = infer(server, protocol, "cached", {"IN": x}, ["OUT", "CALLS"])
    again = infer(server, protocol, "cached", {"IN": x}, ["OUT", "CALLS"])
    other = infer(server, protocol, "cached", {"IN": x + 1}, ["CALLS"])
    assert again["OUT"].tolist() == x.tolist()
    assert again["CALLS"].tolist() == first["CALLS"].tolist()
    assert other["CALLS"].tolist() == [int(first["CALLS"][0]) + 1]
    counted(server, {"cached": before["success"]}, 3)
    after = cache_counts(server)
    assert {kind: after[kind] - before[kind] for kind in after} == {
        "cache_hit": 1,
        "cache_miss": 2,
        "success": 3,
    }
    entry = stats(server, "cached")
    assert int(entry["execution_count"]) == int(after["cache_miss"])  # a hit runs nothing


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_hit_answers_the_requests_own_id(server: Peer, protocol: str) -> None:
    """The same request twice, then the same inputs under another id: both hits (the id is not
    an input), each answering the id it was sent with (rosettaserve answers the first from the
    request's bytes, the second from its inputs)."""
    module: Any = httpclient if protocol == "http" else grpcclient
    x = np.array([5.0, 6.0 if protocol == "http" else 7.0], np.float32)
    tensor = module.InferInput("IN", [2], "FP32")
    tensor.set_data_from_numpy(x)
    before = cache_counts(server)
    with client(server, protocol) as c:
        ids = [c.infer("cached", [tensor], request_id=i).get_response() for i in ("a", "a", "b")]
    found = [r["id"] if protocol == "http" else r.id for r in ids]
    assert found == ["a", "a", "b"]
    counted(server, {"cached": before["success"]}, 3)
    after = cache_counts(server)
    assert (after["cache_hit"] - before["cache_hit"], after["success"] - before["success"]) == (
        2,
        3,
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_configuration_shows_the_cache_and_the_labels(server: Peer, protocol: str) -> None:
    """response_cache {"enable": true}, and the output's label_filename, as Triton shows them.
    A documented difference: Triton shows label_filename "" on an output without labels (it
    fills every field in), ours leaves it out."""
    with client(server, protocol) as c:
        cached = config(c, protocol, "cached")
        scores = config(c, protocol, "scores")
        double = config(c, protocol, "double")
    assert cached["response_cache"] == {"enable": True}
    assert "response_cache" not in double or double["response_cache"] == {"enable": False}
    assert [o.get("label_filename") for o in scores["output"]] == ["labels.txt"]
    unlabelled = [o.get("label_filename") for o in double["output"]]
    # (gRPC's JSON leaves an empty string out)
    assert unlabelled == ([""] if server.name == "triton" and protocol == "http" else [None])


def config(c: Any, protocol: str, model: str) -> dict[str, Any]:
    """The model's configuration: REST's JSON, or gRPC's message as JSON (field names kept)."""
    if protocol == "http":
        doc: dict[str, Any] = c.get_model_config(model)
        return doc
    message = c.get_model_config(model).config
    return MessageToDict(message, preserving_proto_field_name=True)


TRITON_TRACE = {"log_frequency": "0", "trace_file": "", "trace_mode": "triton"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_trace_settings_read_and_updated(server: Peer, protocol: str) -> None:
    """A model's trace settings are the server's until it sets its own; null (an empty value
    over gRPC) gives one back. Documented differences: Triton's default trace_rate is 1000,
    ours 1; Triton's mode is "triton" and it shows log_frequency and trace_file, ours is
    "opentelemetry" (traces go through the OpenTelemetry support) without those two."""
    rate = "1000" if server.name == "triton" else "1"
    extra = TRITON_TRACE if server.name == "triton" else {"trace_mode": "opentelemetry"}
    expected = {"trace_level": ["OFF"], "trace_rate": rate, "trace_count": "-1", **extra}
    with client(server, protocol) as c:
        assert trace(c, protocol) == expected
        assert trace(c, protocol, "double") == expected
        updated = update_trace(c, protocol, "double", {"trace_rate": "5", "trace_count": "7"})
        assert updated == {**expected, "trace_rate": "5", "trace_count": "7"}
        assert trace(c, protocol, "double") == updated
        assert trace(c, protocol) == expected  # the server's are untouched
        back = update_trace(c, protocol, "double", {"trace_rate": None, "trace_count": None})
        assert back == expected


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_trace_settings_refused(server: Peer, protocol: str) -> None:
    """The same status from both for a trace_file (501: never named over the network) and a
    trace_rate that is not a number (400). Documented differences: a trace_level without a
    trace file is 400 on Triton (it writes traces only to a file), 501 on ours without
    --otel-exporter (spans leave only through an exporter); the settings of an unknown model are
    400 on Triton, 404 on ours (as every other answer about an unknown model, on both)."""
    triton = server.name == "triton"
    with client(server, protocol) as c:
        level = refused(lambda: update_trace(c, protocol, "", {"trace_level": ["TIMESTAMPS"]}))
        assert level.status() == status_of(protocol, 400 if triton else 501)
        assert ("trace file name is not given" if triton else "--otel-exporter") in level.message()
        named = refused(lambda: update_trace(c, protocol, "", {"trace_file": "/tmp/t.json"}))
        assert named.status() == status_of(protocol, 501)
        rate = refused(lambda: update_trace(c, protocol, "", {"trace_rate": "abc"}))
        assert rate.status() == status_of(protocol, 400)
        assert rate.message().startswith("Unable to parse 'trace_rate'")
        unknown = refused(lambda: trace(c, protocol, "nothing"))
        assert unknown.status() == status_of(protocol, 400 if triton else 404)
        assert unknown.message() == (
            "Request for unknown model : nothing" if triton else "unknown model 'nothing'"
        )
        assert trace(c, protocol)["trace_level"] == ["OFF"]  # nothing changed


def trace(c: Any, protocol: str, model: str = "") -> dict[str, Any]:
    if protocol == "http":
        doc: dict[str, Any] = c.get_trace_settings(model_name=model or None)
        return doc
    return unpacked(c.get_trace_settings(model_name=model or None, as_json=True))


def update_trace(c: Any, protocol: str, model: str, settings: dict[str, Any]) -> dict[str, Any]:
    if protocol == "http":
        doc: dict[str, Any] = c.update_trace_settings(model_name=model, settings=settings)
        return doc
    return unpacked(c.update_trace_settings(model_name=model, settings=settings, as_json=True))


def unpacked(answer: dict[str, Any]) -> dict[str, Any]:
    """gRPC's TraceSettingResponse as REST's document: each setting a list of strings, one
    value unwrapped (trace_level stays a list)."""
    settings = {name: s.get("value", []) for name, s in answer["settings"].items()}
    return {n: v if n == "trace_level" else (v[0] if v else "") for n, v in settings.items()}


LOGGING = {
    "log_file": "",
    "log_info": True,
    "log_warning": True,
    "log_error": True,
    "log_verbose_level": 0,
    "log_format": "default",
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_log_settings_read_and_updated(server: Peer, protocol: str) -> None:
    with client(server, protocol) as c:
        assert logging(c, protocol) == LOGGING
        changed = update_logging(c, protocol, {"log_verbose_level": 1, "log_info": False})
        assert changed == {**LOGGING, "log_verbose_level": 1, "log_info": False}
        assert logging(c, protocol) == changed
        assert update_logging(c, protocol, {"log_verbose_level": 0, "log_info": True}) == LOGGING


OURS_REFUSAL = "'log_verbose_level' must be an integer >= 0, got 'loud'"


def test_log_settings_refused(server: Peer) -> None:
    """A value of the wrong type changes nothing; a log_file is refused (501 from both, worded
    apart). A documented difference: Triton answers 500
    (its JSON reader's failure, which names the type it wanted), ours 400 (the client's
    mistake, naming the setting)."""
    with client(server, "http") as c:
        with pytest.raises(InferenceServerException) as caught:
            c.update_log_settings({"log_verbose_level": "loud"})
        assert logging(c, "http") == LOGGING  # nothing changed
        with pytest.raises(InferenceServerException) as named:
            c.update_log_settings({"log_file": "/tmp/tritonparity.log"})
        assert named.value.status() == "501"  # a log file is never named over the network
    assert caught.value.status() == status_of("http", 500 if server.name == "triton" else 400)
    assert caught.value.message() == (
        "attempt to access JSON non-unsigned-integer as unsigned-integer"
        if server.name == "triton"
        else OURS_REFUSAL
    )


def logging(c: Any, protocol: str) -> dict[str, Any]:
    if protocol == "http":
        doc: dict[str, Any] = c.get_log_settings()
        return doc
    return log_values(c.get_log_settings(as_json=True))


def update_logging(c: Any, protocol: str, settings: dict[str, Any]) -> dict[str, Any]:
    if protocol == "http":
        doc: dict[str, Any] = c.update_log_settings(settings)
        return doc
    return log_values(c.update_log_settings(settings, as_json=True))


def log_values(answer: dict[str, Any]) -> dict[str, Any]:
    """gRPC's LogSettingsResponse as REST's document: each setting its oneof's value."""
    values = {}
    for name, setting in answer["settings"].items():
        [(kind, value)] = setting.items() if setting else [("bool_param", False)]
        values[name] = int(value) if kind == "uint32_param" else value
    return values
