"""The server's HTTP application under real uvicorn (web/asgi.py): an OIP infer, a streamed
answer, errors in their protocol's shape, HEAD and the request body limit answer as on the
server's own port."""

from __future__ import annotations

import asyncio
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from rosettaserve.server.server import Server
from rosettaserve.server.settings import Settings
from rosettaserve.web.asgi import AsgiApp
from tests.conftest import EXAMPLES

MODELS = ("greeter_python", "words_stream_python")
LIMIT = 64 * 1024  # the request body limit of the adapter here
STARTUP_S = 60.0  # how long uvicorn may take to listen (it is up long before on any machine)


class Uvicorn(threading.Thread):
    """uvicorn serving ``AsgiApp(server.http_app)`` on its own event loop, models loaded."""

    def __init__(self, repository: Path, sock: socket.socket) -> None:
        super().__init__(daemon=True)
        self.repository, self.sock = repository, sock
        self.server: uvicorn.Server | None = None
        self.failed: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # seen by the test, which waits for `started`
            self.failed = exc

    async def _serve(self) -> None:
        server = Server(Settings(repository=self.repository, log_level="info"))  # edge on
        await server.repository.load_all()
        server.dataplane.started = True
        app = AsgiApp(server.http_app, max_request_size=LIMIT)
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        await self.server.serve(sockets=[self.sock])

    def wait_started(self) -> None:
        deadline = time.monotonic() + STARTUP_S
        while not (self.server is not None and self.server.started):
            assert self.failed is None, self.failed
            assert self.is_alive(), "uvicorn stopped"
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    repository = tmp_path_factory.mktemp("asgi_models")
    for name in MODELS:
        shutil.copytree(EXAMPLES / name, repository / name)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    serving = Uvicorn(repository, sock)
    serving.start()
    serving.wait_started()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30.0) as client:
            yield client
    finally:
        assert serving.server is not None
        serving.server.should_exit = True
        serving.join(timeout=30.0)
        sock.close()


def test_an_oip_infer_answers_as_on_the_servers_own_port(http: httpx.Client) -> None:
    doc = {"inputs": [{"name": "NAME", "datatype": "BYTES", "shape": [2], "data": ["a", "b"]}]}
    sent = {"X-Request-ID": "r1"}
    response = http.post("/v2/models/greeter_python/infer", json=doc, headers=sent)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-request-id"] == "r1"  # the edge around the app ran too
    (output,) = response.json()["outputs"]
    assert output["name"] == "GREETING"
    assert output["data"] == ["hello, a!", "hello, b!"]


def test_a_streamed_answer_arrives_item_by_item(http: httpx.Client) -> None:
    doc = {"str_data": "the quick brown fox", "model": "words_stream_python"}
    url = "/grps/v1/infer/predict?streaming=true"
    with http.stream("POST", url, json=doc) as response:
        assert response.status_code == 200
        assert "content-length" not in response.headers
        assert response.headers["transfer-encoding"] == "chunked"
        lines = [line for line in response.iter_lines() if line]
    assert len(lines) == 4
    assert all('"status"' in line for line in lines)


def test_errors_keep_their_protocols_shape(http: httpx.Client) -> None:
    missing = http.get("/nowhere")
    assert missing.status_code == 404
    assert missing.json() == {"error": "Not Found: no route for GET /nowhere"}
    wrong = http.delete("/v2/models/greeter_python/infer")
    assert wrong.status_code == 405
    assert wrong.headers["allow"] == "POST"
    unknown = http.post("/v2/models/nobody/infer", json={"inputs": []})
    assert unknown.status_code == 404
    assert "nobody" in unknown.json()["error"]


def test_head_sends_the_length_of_get_without_a_body(http: httpx.Client) -> None:
    get = http.get("/v2/health/live")
    head = http.head("/v2/health/live")
    assert head.status_code == get.status_code == 200
    assert head.headers["content-length"] == str(len(get.content))
    assert head.content == b""


def test_a_body_over_the_limit_is_refused(http: httpx.Client) -> None:
    response = http.post("/v2/models/greeter_python/infer", content=b"x" * (LIMIT + 1))
    assert response.status_code == 413
    assert str(LIMIT) in response.json()["error"]
