#!/usr/bin/env bash
# HTTP stack benchmark: servers pinned to core 0, wrk and the latency client to core 1.
# Usage: bash bench/run_http.sh [http_stacks.py options, e.g. --runs 3 --only raw-asgi]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "wrk missing: apt-get install -y wrk" >&2; exit 1; }
[ "$(nproc)" -ge 2 ] || { echo "needs 2 cores (server on 0, load on 1)" >&2; exit 1; }
exec taskset -c 1 .venv/bin/python bench/http_stacks.py --server-cpu 0 --load-cpu 1 "$@"
