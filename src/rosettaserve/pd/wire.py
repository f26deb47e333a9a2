"""The PD wire contract, as MindIE's coordinator and instances speak it (llm_pd.md §1.4-1.5).

Scheduler -> P: the client's URL and body unchanged, plus headers ``req-id`` (decimal; P accepts
hex digits, at most 1024), ``req-type: prefill``, ``d-target: <D ip>[;<port>]``, ``d-port`` and
``is-recompute: true|false``; ours: ``pd-job-key`` (the request's secret, which binds its
hand-over and its KV lease to the parties that know it; P makes one when it is absent) and
``pd-tenant: <name>[;weight=<w>]`` (the client's API key as the scheduler's tenant: the key's
place among its keys, never the key, and its weight; absent without keys), which P and D take
from a peer only (prefill.py) and queue the request under, as ``pd:<name>`` (core/share.py).
P -> scheduler: ``{"reqId", "isStream", "output", "isLastResp"}``; ``output`` and ``isLastResp``
only when streaming or when the request ended at P (MindIE's SendResponseStream).
D -> scheduler, ``GET /dresult``: one chunked ``text/event-stream`` of frames
``reqId:<id>\\0<prefix><body>\\0`` with prefixes ``data:``, ``lastData:``, ``error:``, ``retry:``;
``reqId:0xffffffffffffffff\\0close:<why>\\0`` when a new connection replaces this one (MindIE's
D; ours keeps its first reader and refuses the next), and ``ka:heartbeat\\0`` after an idle
spell.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from rosettaserve.core.errors import InvalidInput
from rosettaserve.core.generate import GenerateDelta, TokenLogprob, TopLogprob
from rosettaserve.core.share import Share
from rosettaserve.security.keys import MAX_WEIGHT

REQ_ID, REQ_TYPE, D_TARGET, D_PORT, IS_RECOMPUTE, JOB_KEY, TENANT = (
    "req-id",
    "req-type",
    "d-target",
    "d-port",
    "is-recompute",
    "pd-job-key",
    "pd-tenant",
)
PD_HEADERS = (REQ_ID, REQ_TYPE, D_TARGET, D_PORT, IS_RECOMPUTE, JOB_KEY, TENANT)
MAX_REQ_ID = 1024
_HEX = re.compile(r"[0-9a-fA-F]+")
_JOB_KEY = re.compile(r"[0-9A-Za-z_-]{16,128}")
# a scheduler's tenant at an instance: a name no key of the instance's own has (those are key#N)
TENANT_PREFIX = "pd:"
MAX_TENANT = 64
_TENANT = re.compile(rf"[0-9A-Za-z_.:#-]{{1,{MAX_TENANT}}}")
_WEIGHT = re.compile(r"[0-9]{1,16}(\.[0-9]{1,17})?([eE][-+]?[0-9]{1,3})?")  # (no nan, inf, sign)

SEP = b"\0"
DATA, LAST, ERROR, RETRY, CLOSE = "data", "lastData", "error", "retry", "close"
KINDS = (DATA, LAST, ERROR, RETRY, CLOSE)
KA = "ka"
KEEPALIVE = b"ka:heartbeat\0"
CLOSE_ID = "0xffffffffffffffff"  # the reqId MindIE puts on its close: frame
CLOSE_TEXT = "new connection is to established, close the old one."


# -- scheduler -> P headers ----------------------------------------------------------------------


@dataclass(frozen=True)
class PrefillHeaders:
    req_id: str
    d_host: str
    d_port: int
    recompute: bool
    job_key: str = ""  # "": none given
    tenant: Tenant | None = None  # None: none given

    @property
    def d_addr(self) -> str:
        return f"{self.d_host}:{self.d_port}"


def has_pd_headers(headers: Mapping[str, str]) -> bool:
    return any(name in headers for name in PD_HEADERS)


def parse_prefill_headers(headers: Mapping[str, str]) -> PrefillHeaders:
    """The PD headers of a request to a prefill instance; InvalidInput (400) names what is wrong."""
    for name in (REQ_TYPE, REQ_ID, D_TARGET):
        if not headers.get(name, "").strip():
            raise InvalidInput(f"header '{name}' is required on a prefill instance")
    if headers[REQ_TYPE].strip() != "prefill":
        raise InvalidInput(f"header 'req-type' must be 'prefill', got {_shown(headers[REQ_TYPE])}")
    req_id = headers[REQ_ID].strip()
    if not _HEX.fullmatch(req_id):
        raise InvalidInput(f"header 'req-id' must be hex digits, got {_shown(req_id)}")
    if len(req_id) > MAX_REQ_ID:
        raise InvalidInput(
            f"header 'req-id' is {len(req_id)} digits long; at most {MAX_REQ_ID} are accepted"
        )
    recompute = headers.get(IS_RECOMPUTE, "").strip()
    if recompute not in ("", "true", "false"):
        raise InvalidInput(f"header 'is-recompute' must be true or false, got {_shown(recompute)}")
    host, port = _d_target(headers[D_TARGET].strip(), headers.get(D_PORT, "").strip())
    tenant = parse_tenant(headers[TENANT]) if TENANT in headers else None
    return PrefillHeaders(req_id, host, port, recompute == "true", job_key(headers), tenant)


def job_key(headers: Mapping[str, str]) -> str:
    """The ``pd-job-key`` header ("" when absent); InvalidInput when it is not 16 to 128
    letters, digits, ``-`` or ``_``."""
    key = headers.get(JOB_KEY, "").strip()
    if key and not valid_job_key(key):
        raise InvalidInput(f"header '{JOB_KEY}' must be 16 to 128 letters, digits, '-' or '_'")
    return key


def valid_job_key(key: str) -> bool:
    return _JOB_KEY.fullmatch(key) is not None


@dataclass(frozen=True)
class Tenant:
    """Whose request it is at the scheduler: its key's tenant there (``key#N``) and weight."""

    name: str
    weight: float = 1.0

    def share(self, priority: int) -> Share:
        """The request's place in an instance's queues: under a name of the scheduler's."""
        return Share(TENANT_PREFIX + self.name, self.weight, priority)


def tenant_header(share: Share) -> dict[str, str]:
    """What the scheduler tells P of its client's tenant ({} without keys: one tenant)."""
    if not share.tenant:
        return {}
    return {TENANT: f"{share.tenant};weight={share.weight!r}"}


def parse_tenant(text: str) -> Tenant:
    """A ``pd-tenant`` header's value; InvalidInput (400) says what is wrong."""
    where = f"header '{TENANT}'"
    name, sep, weight = (part.strip() for part in text.partition(";"))
    if sep and not weight.startswith("weight="):
        raise InvalidInput(f"{where} must be '<name>' or '<name>;weight=<w>', got {_shown(text)}")
    weight = weight.removeprefix("weight=") if sep else "1"
    if not _WEIGHT.fullmatch(weight):
        raise InvalidInput(f"{where}: a tenant's weight is a number, got {_shown(weight)}")
    return tenant(name, float(weight), where)


def tenant(name: str, weight: float, where: str) -> Tenant:
    """A tenant's name (1 to 64 letters, digits or ``_.:#-``) and weight (in (0, MAX_WEIGHT],
    a key file's range); InvalidInput otherwise."""
    if not _TENANT.fullmatch(name):
        raise InvalidInput(
            f"{where}: a tenant's name is 1 to {MAX_TENANT} letters, digits or '_.:#-', "
            f"got {_shown(name)}"
        )
    if not 0 < weight <= MAX_WEIGHT:  # (NaN and the infinities too)
        raise InvalidInput(
            f"{where}: a tenant's weight must be in (0, {MAX_WEIGHT:g}], got {weight!r}"
        )
    return Tenant(name, weight)


def _d_target(target: str, d_port: str) -> tuple[str, int]:
    parts = target.split(";")
    if len(parts) > 2:
        raise InvalidInput(
            f"header 'd-target' must be '<ip>' or '<ip>;<port>', got {_shown(target)}"
        )
    try:
        host = str(ipaddress.IPv4Address(parts[0]))
    except ValueError:
        raise InvalidInput(
            f"header 'd-target' must hold an IPv4 address, got {_shown(target)}"
        ) from None
    port = parts[1] if len(parts) == 2 else d_port
    if not port:
        raise InvalidInput("header 'd-target' names no port ('<ip>;<port>') and 'd-port' is absent")
    if not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        where = "header 'd-target'" if len(parts) == 2 else "header 'd-port'"
        raise InvalidInput(
            f"{where}: the decode instance's port must be a number in [1, 65535], "
            f"got {_shown(port)}"
        )
    return host, int(port)


def _shown(text: str) -> str:
    """A header value quoted in an error message, cut short."""
    return repr(text) if len(text) <= 40 else repr(text[:40]) + "..."


def prefill_headers(
    req_id: str, d_host: str, d_port: int, recompute: bool, key: str = ""
) -> dict[str, str]:
    headers = {
        REQ_ID: req_id,
        REQ_TYPE: "prefill",
        D_TARGET: f"{d_host};{d_port}",
        D_PORT: str(d_port),
        IS_RECOMPUTE: "true" if recompute else "false",
    }
    return headers | {JOB_KEY: key} if key else headers


# -- P -> scheduler reply ------------------------------------------------------------------------


def prefill_reply(req_id: str, is_stream: bool, output: bytes, last: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {"reqId": req_id, "isStream": is_stream}
    if is_stream or last:
        doc["isLastResp"] = last
        doc["output"] = output.decode("utf-8", errors="replace")
    return doc


@dataclass(frozen=True)
class PrefillReply:
    req_id: str
    is_stream: bool
    output: bytes
    last: bool


def parse_prefill_reply(body: bytes) -> PrefillReply:
    doc = orjson.loads(body)
    if not isinstance(doc, dict) or not isinstance(doc.get("reqId"), str):
        raise ValueError("a prefill reply must be an object with a string 'reqId'")
    output = doc.get("output") or ""
    if not isinstance(output, str) or not isinstance(doc.get("isStream"), bool):
        raise ValueError("a prefill reply needs a boolean 'isStream' and a string 'output'")
    last = doc.get("isLastResp") is True
    return PrefillReply(doc["reqId"], doc["isStream"], output.encode(), last)


# -- /dresult frames -----------------------------------------------------------------------------


def frame(req_id: str, kind: str, body: bytes) -> bytes:
    return b"reqId:" + req_id.encode() + SEP + kind.encode() + b":" + body + SEP


def close_frame() -> bytes:
    return frame(CLOSE_ID, CLOSE, CLOSE_TEXT.encode())


@dataclass
class Frame:
    req_id: str
    kind: str  # data, lastData, error, retry, close, ka
    body: bytes


class FrameParser:
    """Frames from a ``/dresult`` byte stream cut anywhere.

    Bodies never hold NUL (JSON escapes it) except vLLM 0.2's chunk delimiter, which ends a body:
    an empty token right after a body is that NUL. When it arrives in a later read than its
    body, it comes out as a frame of its own (``body == b"\\0"``), which a byte stream forwards
    the same.
    """

    def __init__(self) -> None:
        self._partial = b""
        self._req_id = ""
        self._last: Frame | None = None  # the body frame before the next token

    def feed(self, data: bytes) -> list[Frame]:
        tokens = (self._partial + data).split(SEP)
        self._partial = tokens.pop()
        out: list[Frame] = []
        for token in tokens:
            self._token(token, out)
        return out

    def _token(self, token: bytes, out: list[Frame]) -> None:
        last, self._last = self._last, None
        if not token:
            if last is not None:  # the NUL that ended a body
                if out and out[-1] is last:
                    last.body += SEP
                    self._last = last
                else:
                    self._last = Frame(last.req_id, last.kind, SEP)
                    out.append(self._last)
            return
        key, _, rest = token.partition(b":")
        name = key.decode("latin-1")
        if name == "reqId":
            self._req_id = rest.decode("latin-1")
        elif name == KA:
            out.append(Frame("", KA, rest))
        elif name in KINDS:
            self._last = Frame(self._req_id, name, rest)
            out.append(self._last)
        else:
            raise ValueError(f"unknown /dresult frame keyword {name[:40]!r}")


# -- shipped deltas (P -> D) ---------------------------------------------------------------------


def delta_doc(d: GenerateDelta) -> dict[str, Any]:
    lps = None
    if d.logprobs is not None:
        lps = [
            [t.token_id, t.token, t.logprob, [[a.token_id, a.token, a.logprob] for a in t.top]]
            for t in d.logprobs
        ]
    return {"text": d.text, "ids": d.token_ids, "special": d.special, "logprobs": lps}


def delta_from_doc(doc: Any) -> GenerateDelta:
    """A shipped delta; ValueError names the field that is missing or wrong."""
    if not isinstance(doc, dict):
        raise ValueError("a delta must be an object")
    for key in ("text", "ids", "special"):
        if key not in doc:
            raise ValueError(f"a delta needs '{key}'")
    text, ids, special = doc["text"], doc["ids"], doc["special"]
    if not isinstance(text, str):
        raise ValueError("a delta's 'text' must be a string")
    if not _ints(ids):
        raise ValueError("a delta's 'ids' must be a list of token ids (integers >= 0)")
    assert isinstance(ids, list)
    booleans = isinstance(special, list) and all(isinstance(s, bool) for s in special)
    if not booleans or len(special) != len(ids):
        raise ValueError("a delta's 'special' must hold one boolean per token")
    raw = doc.get("logprobs")
    lps = None if raw is None else [_logprob(item) for item in _list(raw)]
    return GenerateDelta(0, text, list(ids), list(special), lps)


def _logprob(item: Any) -> TokenLogprob:
    token_id, token, value, top = _list(item, 4)
    alts = [TopLogprob(*_entry(a)) for a in _list(top)]
    return TokenLogprob(*_entry([token_id, token, value]), tuple(alts))


def _entry(item: Any) -> tuple[int, str, float]:
    token_id, token, value = _list(item, 3)
    if not _ints([token_id]) or not isinstance(token, str) or not isinstance(value, int | float):
        raise ValueError("a logprob entry is [token id, token, logprob]")
    return token_id, token, float(value)


def _list(value: Any, size: int | None = None) -> list[Any]:
    if not isinstance(value, list) or (size is not None and len(value) != size):
        raise ValueError(f"expected a list{f' of {size}' if size else ''}, got {value!r:.80}")
    return value


def _ints(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value
    )
