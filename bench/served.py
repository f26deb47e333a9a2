"""A ``rosettaserve serve`` started for a benchmark: the process, once the URL it prints on
its first lines answers ``/v2/health/ready`` with 200."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from collections.abc import Mapping


def start_ready(
    cmd: list[str], env: Mapping[str, str] | None = None, tries: int = 400
) -> tuple[subprocess.Popen[str], str]:
    """``cmd`` (a ``serve`` with ``--http-port 0``) started; its process and HTTP URL once
    ready (``tries`` checks 50 ms apart)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    url = next((line.split()[1] for line in proc.stdout if line.startswith("http: ")), None)
    if url is None:
        raise RuntimeError("the server did not start")
    for _ in range(tries):
        try:
            with urllib.request.urlopen(url + "/v2/health/ready") as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the server never became ready")
