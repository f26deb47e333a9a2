"""What the scheduler passes on between its client and a prefill instance (RFC 9110 §7.6).

The scheduler is an intermediary with a transport of its own, so each hop's framing stays on
that hop:
- hop-by-hop fields (``Connection`` and every field it names, ``Keep-Alive``, ``TE``,
  ``Transfer-Encoding``, ``Upgrade``, ...) end at the scheduler;
- the client's body reached the scheduler already inflated (transport.content_coding): its
  ``Content-Encoding``, and the digests of the coded bytes, no longer describe what is
  forwarded, so they stay behind;
- the client's ``Accept-Encoding`` is the scheduler's to honour (its transport codes the reply it
  sends), not the prefill instance's: P is asked for ``identity``, and a reply coded all the
  same is inflated before it is read;
- the PD headers are the scheduler's own: a client's are dropped;
- of a prefill instance's error reply, the status, body and ``Retry-After`` reach the client.
"""

from __future__ import annotations

from collections.abc import Mapping

from rosettaserve.core.errors import ModelError, ServingError
from rosettaserve.pd.wire import PD_HEADERS
from rosettaserve.web.content_coding import inflated

HOP_BY_HOP = frozenset(
    ("host", "connection", "keep-alive", "proxy-connection", "te", "trailer",
     "transfer-encoding", "upgrade", "expect")
)  # fmt: skip
# fields that describe the client's coded body or the coding it reads (the scheduler's business)
REPRESENTATION = frozenset(
    ("content-length", "content-encoding", "content-md5", "content-digest", "repr-digest",
     "digest", "accept-encoding", "want-content-digest", "want-repr-digest")
)  # fmt: skip
NOT_FORWARDED = HOP_BY_HOP | REPRESENTATION | frozenset(PD_HEADERS)
ASKED = {"accept-encoding": "identity"}  # what the scheduler reads of P's replies
ERROR_HEADERS = ("retry-after",)  # of P's error reply, what its client is told too
MAX_REPLY_BYTES = 64 * 1024 * 1024  # a prefill instance's reply, inflated


def to_prefill(headers: Mapping[str, str]) -> dict[str, str]:
    """The client's header fields that go on to the prefill instance (names in lower case)."""
    named = headers.get("connection")
    drop = NOT_FORWARDED | _tokens(named) if named else NOT_FORWARDED
    kept = {k: v for k, v in headers.items() if k not in drop}
    return kept | ASKED


def reply_body(source: object, headers: Mapping[str, str], body: bytes) -> bytes:
    """A prefill instance's reply body as sent, its content coding undone (``source``: the
    instance, named in the error when the body cannot be read)."""
    coding = headers.get("content-encoding", "").strip()
    if not coding or coding.lower() == "identity":
        return body
    try:
        return bytes(inflated(coding, body, MAX_REPLY_BYTES))
    except ServingError as exc:
        raise ModelError(f"prefill instance {source} answered a body that cannot be read: "
                         f"{exc.message}") from None  # fmt: skip


def error_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Of a prefill instance's error reply, the header fields its client gets too."""
    return {k: headers[k] for k in ERROR_HEADERS if k in headers}


def _tokens(value: str) -> frozenset[str]:
    return frozenset(t.strip().lower() for t in value.split(",") if t.strip())
