#!/usr/bin/env bash
# Triton perf_analyzer against rosettaserve: server pinned to core 0, load to core 1.
# Cases: {mlp_onnx, versioned_python (-b 8)} x {HTTP binary, HTTP JSON, gRPC}, and mlp_onnx
# through system shared memory over HTTP and gRPC, each at concurrency 1 and 16; the whole set is repeated RUNS times (interleaved, so machine
# noise hits every case alike) and the median of the runs is printed as a table.
# Usage: bash bench/perf_analyzer.sh     (env: RUNS=3 INTERVAL_MS=3000 CONCURRENCY=1:16:15
#                                           OUT=dir QUIET_WAIT=120 ATTEMPTS=3 PIN_VERSION=1)
# Run bench/setup_perf_analyzer.sh once first.
set -euo pipefail
cd "$(dirname "$0")/.."
PA=bench/.tools/perf_analyzer
[ -x "$PA" ] || { echo "missing $PA: run bench/setup_perf_analyzer.sh" >&2; exit 1; }
[ "$(nproc)" -ge 2 ] || { echo "needs 2 cores (server on 0, load on 1)" >&2; exit 1; }
RUNS=${RUNS:-3}
INTERVAL_MS=${INTERVAL_MS:-3000}
CONCURRENCY=${CONCURRENCY:-1:16:15}
# PIN_VERSION=0 omits -x; perf_analyzer then fails with "failed to find the requested
# model version" because rosettaserve's stats never count `queue` (see bench/README.md).
PIN_VERSION=${PIN_VERSION:-1}
QUIET_WAIT=${QUIET_WAIT:-120}
ATTEMPTS=${ATTEMPTS:-3}
IFS=: read -r c_start c_end c_step <<<"$CONCURRENCY"
levels=$(seq "$c_start" "${c_step:-1}" "${c_end:-$c_start}" | wc -l)
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/perf_analyzer.XXXXXX")}
mkdir -p "$OUT"

# --allow-client-shm: the shared-memory cases register their regions
taskset -c 0 .venv/bin/rosettaserve serve examples/models --http-port 0 --grpc-port 0 \
    --allow-client-shm true >"$OUT/server.log" 2>&1 &
server=$!
trap 'kill -TERM "$server" 2>/dev/null && wait "$server" || true' EXIT
for _ in $(seq 300); do
    grep -q '^grpc: ' "$OUT/server.log" && break
    kill -0 "$server" 2>/dev/null || { cat "$OUT/server.log" >&2; exit 1; }
    sleep 0.2
done
http=$(sed -n 's|^http: http://||p' "$OUT/server.log")
grpc=$(sed -n 's|^grpc: ||p' "$OUT/server.log")
if [ -z "$http" ] || [ -z "$grpc" ]; then echo "server did not report its ports" >&2; exit 1; fi
echo "server pid $server, http $http, grpc $grpc, results in $OUT" >&2

# name | model args | version pinned with -x | transport args
cases=(
    "mlp_onnx/http-binary|-m mlp_onnx --shape INPUT0:1,4|1|-i http -u $http"
    "mlp_onnx/http-json|-m mlp_onnx --shape INPUT0:1,4|1|-i http -u $http --input-tensor-format json --output-tensor-format json"
    "mlp_onnx/grpc|-m mlp_onnx --shape INPUT0:1,4|1|-i grpc -u $grpc"
    "mlp_onnx/http-shm|-m mlp_onnx --shape INPUT0:1,4|1|-i http -u $http --shared-memory system"
    "mlp_onnx/grpc-shm|-m mlp_onnx --shape INPUT0:1,4|1|-i grpc -u $grpc --shared-memory system"
    "versioned_python-b8/http-binary|-m versioned_python -b 8 --shape INPUT0:4|2|-i http -u $http"
    "versioned_python-b8/http-json|-m versioned_python -b 8 --shape INPUT0:4|2|-i http -u $http --input-tensor-format json --output-tensor-format json"
    "versioned_python-b8/grpc|-m versioned_python -b 8 --shape INPUT0:4|2|-i grpc -u $grpc"
)
cpu_ticks() { # per core 0/1: busy and total jiffies
    awk '/^cpu[01] /{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat
}
wait_quiet() { # other people share this machine: wait until cores 0 and 1 are <5% busy
    local deadline=$((SECONDS + QUIET_WAIT)) a b
    while [ "$SECONDS" -lt "$deadline" ]; do
        a=$(cpu_ticks); sleep 1; b=$(cpu_ticks)
        paste -d' ' <(echo "$a") <(echo "$b") |
            awk '$3 - $1 > 0.05 * ($4 - $2) { busy = 1 } END { exit busy }' && return 0
    done
    echo "cores 0/1 still busy after ${QUIET_WAIT}s; measuring anyway" >&2
}

failed=0
for run in $(seq "$RUNS"); do
    for c in "${cases[@]}"; do
        IFS='|' read -r name model version transport <<<"$c"
        [ "$PIN_VERSION" = 1 ] && model+=" -x $version"
        base="$OUT/${name//\//__}.run$run"
        # shellcheck disable=SC2206  # model/transport are deliberately word-split
        cmd=(taskset -c 1 "$PA" $model $transport --concurrency-range "$CONCURRENCY"
             --measurement-interval "$INTERVAL_MS" -f "$base.csv")
        echo "${cmd[*]}" >"$base.cmd"
        for attempt in $(seq "$ATTEMPTS"); do
            wait_quiet
            echo "run $run/$RUNS $name (attempt $attempt)" >&2
            rm -f "$base.csv"
            rc=0
            "${cmd[@]}" >"$base.log" 2>&1 || rc=$?
            # perf_analyzer exits 0 when a later concurrency level fails to stabilise;
            # it just leaves that row out of the CSV, so count the rows too.
            rows=0
            [ -f "$base.csv" ] && rows=$(($(wc -l <"$base.csv") - 1))
            [ "$rc" -eq 0 ] && [ "$rows" -eq "$levels" ] && break
            echo "FAILED (rc $rc, $rows/$levels levels): ${cmd[*]}" >&2
            tail -n 4 "$base.log" >&2
            [ -f "$base.csv" ] && mv "$base.csv" "$base.csv.failed"
            # Only an unstable measurement (noise from other processes) is worth retrying.
            grep -q 'Failed to obtain stable measurement' "$base.log" || break
        done
        [ -f "$base.csv" ] || failed=1
    done
done

# Median over runs, per case and concurrency, of throughput and p50/p99 latency
# (each column separately), plus the throughput range over the runs.
.venv/bin/python - "$OUT" <<'PY'
import csv, glob, os, statistics, sys
from collections import defaultdict
rows = defaultdict(list)
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.run*.csv"))):
    case = os.path.basename(path).rsplit(".run", 1)[0].replace("__", "/")
    for r in csv.DictReader(open(path)):
        rows[case, int(r["Concurrency"])].append(
            (float(r["Inferences/Second"]), int(r["p50 latency"]), int(r["p99 latency"])))
print("| case | concurrency | runs | infer/s | infer/s range | p50 (us) | p99 (us) |")
print("|---|---:|---:|---:|---:|---:|---:|")
for (case, conc), v in sorted(rows.items()):
    ips, p50, p99 = zip(*v)
    print(f"| {case} | {conc} | {len(v)} | {statistics.median(ips):,.0f} "
          f"| {min(ips):,.0f}-{max(ips):,.0f} | {statistics.median(p50):,.0f} "
          f"| {statistics.median(p99):,.0f} |")
PY
exit "$failed"
