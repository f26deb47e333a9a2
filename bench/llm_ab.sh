#!/bin/bash
# Back-to-back LLM A/B: one server per source tree, bench/llm_bench.py against each in turn,
# round after round (A B A B ...), so both see the same machine state.
#
#   TREES="/path/to/before:18800 /path/to/after:18802" RUNS=7 CONC=1,16,32 bench/llm_ab.sh REPO
#
# REPO: a model repository holding the tiny Llama (`make serve`'s examples/models, or a copy).
# Each tree serves with its own sources (PYTHONPATH=TREE/src: compiled modules there are used),
# pinned to SERVER_CPUS (default 1); the client is pinned to CLIENT_CPUS (default 0).
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-$HERE/.venv/bin/python}
REPO=${1:?usage: TREES="tree:port ..." bench/llm_ab.sh REPO}
PIDS=""
trap 'kill $PIDS 2>/dev/null' EXIT
for t in $TREES; do
  tree=${t%%:*}; port=${t##*:}
  (cd "$tree" && PYTHONPATH=$tree/src exec taskset -c "${SERVER_CPUS:-1}" "$PY" -m rosettaserve \
    serve "$REPO" --http-port "$port" --grpc-port 0 --log-level warning) > "/tmp/llm_ab-$port.log" 2>&1 < /dev/null &
  PIDS="$PIDS $!"
done
for t in $TREES; do
  port=${t##*:}
  for _ in $(seq 1 240); do curl -sf "http://127.0.0.1:$port/v2/health/ready" > /dev/null && break; sleep 0.5; done
done
for r in $(seq 1 "${RUNS:-3}"); do
  for t in $TREES; do
    tree=${t%%:*}; port=${t##*:}
    echo "== $tree run $r $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    taskset -c "${CLIENT_CPUS:-0}" "$PY" "$HERE/bench/llm_bench.py" --url "http://127.0.0.1:$port" \
      --num-prompts 64 --output-len 64 --concurrency "${CONC:-1,16,32}" | tail -n +3
  done
done
