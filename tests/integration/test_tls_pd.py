"""Prefill/decode over TLS and keys: a scheduler with an HTTPS front and a key, instances that
require mutual TLS and a key of their own. Scheduler -> prefill, prefill -> decode (the hand
over), decode -> prefill (the KV cache) and the /dresult stream all go over verified TLS with
the peer key; a scheduler that cannot verify its instances says so and answers with an error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.integration.tls_support import Pki, make_pki
from tests.pdproc import eventually, llm_repo, start_instance, start_scheduler
from tests.serverproc import ServerProcess, stop_cleanly

TIMEOUT_S = 120.0
FRONT_KEY, PEER_KEY = "front-key-11aa", "peer-key-22bb"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def peer_args(pki: Pki) -> list[str]:
    return ["--peer-ca", str(pki.ca_pem), "--peer-cert", str(pki.client_pem),
            "--peer-key", str(pki.client_key), "--peer-api-key", PEER_KEY]  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[dict[str, Any]]:
    repo = llm_repo(tmp_path_factory.mktemp("pd_repo"))
    own = [*pki.server_args(mutual=True), "--api-key", PEER_KEY, *peer_args(pki)]
    context = pki.context(cert=True)
    p = start_instance(repo, "prefill", *own, context=context)
    d = start_instance(repo, "decode", *own, context=context)
    front = [*pki.server_args(), "--api-key", FRONT_KEY, *peer_args(pki)]
    s = start_scheduler([p], [d], *front, context=pki.context())
    yield {"prefill": p, "decode": d, "scheduler": s}
    for proc in (s, p, d):
        stop_cleanly(proc)


def sdk(url: str, pki: Pki, key: str) -> openai.OpenAI:
    transport = httpx.Client(verify=pki.context(), timeout=TIMEOUT_S)
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, http_client=transport)


def instance_status(instance: ServerProcess, pki: Pki) -> dict[str, Any]:
    with httpx.Client(verify=pki.context(cert=True), timeout=TIMEOUT_S) as client:
        reply = client.get(instance.http_url + "/v1/status", headers={"x-api-key": PEER_KEY})
        assert reply.status_code == 200
        return dict(reply.json())


def test_the_urls_are_https(cluster: dict[str, Any]) -> None:
    assert all(cluster[k].http_url.startswith("https://") for k in cluster)


def test_a_request_split_over_tls_with_the_keys(cluster: dict[str, Any], pki: Pki) -> None:
    client = sdk(cluster["scheduler"].http_url, pki, FRONT_KEY)
    done = client.completions.create(
        model="tiny_llama", prompt="Once upon", max_tokens=8, temperature=0
    )
    assert done.choices[0].text
    stream = client.completions.create(
        model="tiny_llama", prompt="Once upon", max_tokens=8, temperature=0, stream=True
    )
    assert "".join(chunk.choices[0].text for chunk in stream) == done.choices[0].text
    prefill = instance_status(cluster["prefill"], pki)["prefill"]
    assert prefill["handovers"] >= 1  # prefill -> decode over TLS
    assert prefill["released"] >= 1  # decode fetched the KV cache over TLS and released it


def test_the_front_needs_its_key_and_it_is_not_the_instances(
    cluster: dict[str, Any], pki: Pki
) -> None:
    url = cluster["scheduler"].http_url
    with pytest.raises(openai.AuthenticationError):
        sdk(url, pki, PEER_KEY).completions.create(model="tiny_llama", prompt="x", max_tokens=2)
    instance = cluster["prefill"].http_url  # nor is the front's key the instances'
    with httpx.Client(verify=pki.context(cert=True), timeout=TIMEOUT_S) as client:
        refused = client.get(instance + "/v1/status", headers={"x-api-key": FRONT_KEY})
        assert refused.status_code == 401
    with httpx.Client(verify=pki.context(), timeout=TIMEOUT_S) as client:
        assert client.get(url + "/v2/health/ready").status_code == 200  # probes stay open


def test_a_scheduler_that_cannot_verify_its_instances_says_so_and_answers_an_error(
    cluster: dict[str, Any], pki: Pki, tmp_path: Path
) -> None:
    stranger = make_pki(tmp_path / "other")  # another CA: the instances' certificates fail
    args = [*pki.server_args(), "--api-key", FRONT_KEY, "--peer-ca", str(stranger.ca_pem)]
    s = start_scheduler([cluster["prefill"]], [cluster["decode"]], *args, wait_ready=False)
    try:
        eventually(lambda: any("TLS with 127.0.0.1:" in line for line in s.lines))
        line = next(line for line in s.lines if "TLS with 127.0.0.1:" in line)
        assert "CERTIFICATE_VERIFY_FAILED" in line or "certificate verify failed" in line
        with pytest.raises(openai.APIStatusError) as caught:
            sdk(s.http_url, pki, FRONT_KEY).completions.create(
                model="tiny_llama", prompt="x", max_tokens=2, timeout=30
            )
        assert caught.value.status_code == 503
    finally:
        stop_cleanly(s)
