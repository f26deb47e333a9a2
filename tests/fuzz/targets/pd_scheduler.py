"""What the PD scheduler reads off the network: a decode instance's ``/dresult`` bytes
(``wire.FrameParser``), an instance's ``/v1/status`` document (``pool.read_status``), a client's
body for the model it names (``pool.model_of``), the client's header fields it forwards
(``forwarding.to_prefill``), a prefill instance's coded reply (``forwarding.reply_body``) and the
prefix report in its status (``prefix_report.read_report``).

Properties: the frame parser raises only ValueError, and the same bytes cut anywhere carry the
same body bytes for each request (a NUL that ends a body may come out as a frame of its own);
a status document of any shape leaves typed figures and says ready only for ``RoleReady`` in the
instance's role; a body names a model as two strings, never an error; no hop-by-hop,
representation or PD field is forwarded, and the prefill instance is asked for no coding; an
unreadable reply is a 500 (the instance's fault), nothing else; a prefix report is None or at
most ``MAX_REPORT`` whole hashes, which the prefix table takes and matches by.
"""

from __future__ import annotations

from collections import defaultdict

import orjson

from rosettaserve.core.errors import ModelError
from rosettaserve.pd import forwarding, wire
from rosettaserve.pd.pool import Instance, model_of, read_status
from rosettaserve.pd.prefix_affinity import BLOCK, DIGEST, PrefixTable
from rosettaserve.pd.prefix_report import MAX_REPORT, read_report
from rosettaserve.web.routing import HttpRequest

CODINGS = ("gzip", "deflate", "identity", "gzip, gzip", "br", "x-gzip", "")


def check(data: bytes) -> None:
    _frames(data)
    _status(data)
    assert _strings(model_of(HttpRequest("POST", "/v1/completions", b"", {}, data)))
    _forwarded(data)
    _reply(data)


def _frames(data: bytes) -> None:
    whole = _bodies([data])
    cut = data[0] % (len(data) + 1) if data else 0
    assert _bodies([data[:cut], data[cut:]]) == whole, cut


def _bodies(parts: list[bytes]) -> dict[str, bytes] | str:
    parser, out = wire.FrameParser(), defaultdict(bytes)
    try:
        for part in parts:
            for frame in parser.feed(part):
                assert frame.kind in (*wire.KINDS, wire.KA), frame.kind
                out[frame.req_id] += frame.body
    except ValueError:
        return "refused"
    return dict(out)


def _status(data: bytes) -> None:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return
    for role in ("prefill", "decode"):
        instance = Instance("http://127.0.0.1:1", role)
        instance.streaming = True
        read_status(instance, doc)
        assert min(instance.running, instance.kv_tokens) >= 0
        assert type(instance.running) is type(instance.kv_tokens) is int
        models = instance.models
        assert models is None or all(
            isinstance(v, str) and isinstance(s, str)
            for versions in models.values()
            for v, s in versions.items()
        )
        service = doc.get("service") if isinstance(doc, dict) else None
        said = isinstance(service, dict) and service.get("roleStatus") == "RoleReady"
        assert instance.healthy == (said and service.get("currentRole") == role)
        assert isinstance(instance.state(("", "")), str)
        assert isinstance(instance.state(("m", "1")), str)
    _report(doc)


def _report(doc: object) -> None:
    held = read_report(doc)
    if held is None:
        return
    assert len(held) <= MAX_REPORT
    assert all(isinstance(d, bytes) and len(d) == DIGEST for d in held)
    table = PrefixTable()
    table.report("p", held, table.stamp)
    blocks = sorted(held)[:3]
    assert table.matched(blocks) == ({"p": len(blocks) * BLOCK} if blocks else {})


def _forwarded(data: bytes) -> None:
    headers = {}
    for line in data.decode("latin-1").split("\n"):
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    sent = forwarding.to_prefill(headers)
    assert sent["accept-encoding"] == "identity"
    named = {t.strip().lower() for t in headers.get("connection", "").split(",")} - {""}
    dropped = forwarding.HOP_BY_HOP | forwarding.REPRESENTATION | set(wire.PD_HEADERS) | named
    assert not (set(sent) - {"accept-encoding"}) & dropped, sent


def _reply(data: bytes) -> None:
    coding = CODINGS[data[0] % len(CODINGS)] if data else ""
    try:
        body = forwarding.reply_body("p", {"content-encoding": coding}, data[1:])
    except ModelError:
        return
    assert isinstance(body, bytes)
    if coding.strip() in ("", "identity"):
        assert body == data[1:]


def _strings(pair: tuple[str, str]) -> bool:
    return all(isinstance(s, str) for s in pair) and len(pair) == 2
