"""What one PD instance reads from another (pd/wire.py, pd/decode.py, pd/peers.py): the
headers a prefill instance is sent (``req-id``, ``d-target``, ``pd-job-key``, ``pd-tenant``...)
and the hand-over body a decode instance is sent (``POST /v1/pd/decode``), whose ``pNodeAddr``
is then put in canonical form to be compared with the known peers.

An input is a header block (``name: value`` lines) and a body, split at the first empty line.
Properties: only the project's errors (4xx) escape either parser; what is read is what the
contract allows (an IPv4 ``d-target``, ports in range, a job key of 16 to 128 letters, digits,
``-`` and ``_``, ``kvBytes`` within the limit, a tenant of 1 to 64 name characters and a finite
weight within a key file's range, which a scheduler's header reads back exactly); canonical
addresses are canonical (the form of a canonical host is itself) and never raise anything but
ValueError.
"""

from __future__ import annotations

import ipaddress
import math

from rosettaserve.pd import wire
from rosettaserve.pd.decode import parse_decode_params
from rosettaserve.pd.peers import canonical
from rosettaserve.security.keys import MAX_WEIGHT
from tests.fuzz.targets.refusals import assert_a_refusal

LIMIT = 1 << 20


def check(data: bytes) -> None:
    head, _, body = data.partition(b"\n\n")
    _headers(head.decode("latin-1"))
    _body(body)


def _headers(text: str) -> None:
    headers = {}
    for line in text.split("\n"):
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    try:
        pd = wire.parse_prefill_headers(headers)
    except Exception as exc:
        assert_a_refusal(exc)
        return
    assert isinstance(ipaddress.ip_address(pd.d_host), ipaddress.IPv4Address), pd.d_host
    assert 0 < pd.d_port < 65536
    assert pd.job_key == "" or wire.valid_job_key(pd.job_key), pd.job_key
    assert 0 < len(pd.req_id) <= wire.MAX_REQ_ID
    _tenant(pd.tenant)


def _tenant(tenant: wire.Tenant | None) -> None:
    if tenant is None:
        return
    assert 0 < len(tenant.name) <= wire.MAX_TENANT, tenant.name
    assert tenant.name.isascii(), tenant.name
    assert ";" not in tenant.name, tenant.name
    assert math.isfinite(tenant.weight), tenant.weight
    assert 0 < tenant.weight <= MAX_WEIGHT, tenant.weight
    share = tenant.share(0)
    assert share.tenant.startswith(wire.TENANT_PREFIX)  # never one of the instance's own keys
    assert wire.parse_tenant(wire.tenant_header(share)[wire.TENANT]).weight == tenant.weight


def _body(body: bytes) -> None:
    try:
        p = parse_decode_params(body, LIMIT)
    except Exception as exc:
        assert_a_refusal(exc)
        return
    assert wire.valid_job_key(p.job_key), p.job_key
    assert p.req_id.isascii(), p.req_id
    assert p.req_id.isalnum(), p.req_id
    assert 0 < p.p_addr.port < 65536
    assert 0 <= p.kv_bytes <= LIMIT
    _tenant(p.tenant)
    try:
        host = canonical(p.p_addr.host)
    except ValueError:
        return
    assert canonical(host) == host, (p.p_addr.host, host)
