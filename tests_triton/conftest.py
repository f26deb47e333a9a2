"""rosettaserve checked against the real Triton: every test runs against both servers, started
as real processes on one model repository, with Triton's own client (tritonclient, REST and
gRPC), and asserts the same answers, statuses and statistics from both.

Run from ``.venv-triton`` (``make test-triton``): ``.venv-triton/bin/python -m pytest -q
tests_triton``. That venv holds nvidia-pytriton 0.7.0, whose wheel ships Triton Inference Server
2.51's ``tritonserver`` binary and its Python backend (``servers.py`` runs them without
pytriton's own Python layer), and tritonclient. rosettaserve runs from the main venv
(``ROSETTASERVE`` overrides the path of its console script).

How to add a model (``repository/<name>/``), written once for both servers:

- ``config.pbtxt``: Triton's configuration (``backend: "python"``, ``input``/``output`` with
  ``TYPE_*`` datatypes and ``dims`` without the batch dimension, one CPU instance).
- ``model.yaml``: the same model for rosettaserve (``runtime: python``, ``class``, ``inputs``/
  ``outputs`` with V2 datatypes; with ``max_batch_size`` the shapes include the batch dimension),
  and the same extension settings spelled as model.yaml spells them (``warmup`` for
  ``model_warmup``, ``steps`` for ``ensemble_scheduling``; see docs/model-yaml.md).
- ``1/model.py``: the model as a rosettaserve ``Model`` (imported from ``twofold``, which stands in
  for it inside Triton), then ``class TritonPythonModel(OnTriton, YourModel)``: Triton's Python
  backend runs the same ``load`` and ``predict`` through ``twofold.OnTriton``, and
  ``self.infer(...)`` calls a model through Triton's BLS there. A ``ValueError`` is a bad input
  on both (400 / INVALID_ARG). An ensemble has no model.py: ``1/.gitkeep`` keeps the version
  folder Triton needs.

Server flags a feature needs (a cache size, say) go in ``servers.ROSETTASERVE_ARGS`` and
``servers.TRITON_ARGS``, each in its server's spelling. This Triton build has the extensions
system_shared_memory, sequence, classification, trace, logging and statistics, and the local
response cache (``--cache-config local,size=N``; its library is found already).

How to add a test: take the ``server`` fixture (a ``servers.Peer``; the test runs once per
server) and the helpers of ``clients.py`` (``infer`` over ``"http"`` or ``"grpc"``, ``count``
for the statistics). Where the two servers differ, do not skip: assert each one's answer
(``if server.name == "triton"``), say why in the test, and list the difference in docs/oip.md
("Checked against Triton"). A feature this Triton build lacks is not tested against it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.serverproc import stop_cleanly
from tests_triton.servers import SERVERS, Peer, copy_repository, start


@pytest.fixture(scope="session", params=SERVERS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Peer]:
    """One server at a time (the tests are grouped by it): rosettaserve, then Triton."""
    scratch = tmp_path_factory.mktemp(request.param)
    peer = start(request.param, copy_repository(scratch / "repository"), scratch)
    yield peer
    stop_cleanly(peer.process)
