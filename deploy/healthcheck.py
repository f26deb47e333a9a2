"""The image's HEALTHCHECK: 0 when ROSETTASERVE_HEALTH_URL answers 200, else 1.

The URL defaults to the server's default port; a container started with another
``--http-port`` sets ``ROSETTASERVE_HEALTH_URL`` to match (Kubernetes uses its own probes)."""

import os
import sys
import urllib.request

URL = os.environ.get("ROSETTASERVE_HEALTH_URL", "http://127.0.0.1:8000/v2/health/ready")

try:
    with urllib.request.urlopen(URL, timeout=3) as reply:
        sys.exit(0 if reply.status == 200 else 1)
except OSError:
    sys.exit(1)
