#!/usr/bin/env bash
# Create the peers' and ceilings' virtual environments under bench/.venvs/ (git-ignored):
#   mlserver  MLServer 1.7.1 + uvloop, httptools, orjson
#   kserve    KServe 0.21.0 (no torch) + uvloop, httptools, orjson
#   ceilings  uvicorn[standard] + grpcio, protobuf
#   pytriton  nvidia-pytriton 0.7.0 (bundles tritonserver 2.51 and its Python backend)
#   litserve  LitServe 0.2.19 + uvloop, httptools
# Top-level pins are in bench/compare/peers/requirements/NAME.in; the full resolution in NAME.txt
# is used as constraints, so every package is pinned. Idempotent: a venv whose .in/.txt have not
# changed since it was installed is left alone. RELOCK=1 resolves NAME.in afresh and rewrites
# NAME.txt. Only PyPI (through pip) is needed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
REQS="$ROOT/bench/compare/peers/requirements"
VENVS="$ROOT/bench/.venvs"
PYTHON="${PYTHON:-python3.11}"
PIP_VERSION=26.3
RELOCK="${RELOCK:-0}"

setup() {
    local name="$1" venv="$VENVS/$1" stamp
    stamp="$(cat "$REQS/$name.in" "$REQS/$name.txt" | sha256sum | cut -d' ' -f1)"
    if [[ "$RELOCK" != 1 && -f "$venv/.installed" && "$(cat "$venv/.installed")" == "$stamp" ]]; then
        echo "$name: up to date"
        return
    fi
    echo "$name: installing into $venv"
    if [[ "$RELOCK" == 1 ]]; then rm -rf "$venv"; fi
    [[ -x "$venv/bin/python" ]] || "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet "pip==$PIP_VERSION"
    if [[ "$RELOCK" == 1 ]]; then
        "$venv/bin/python" -m pip install --quiet -r "$REQS/$name.in"
        {
            echo "# Full resolution of $name.in (pip freeze), used as constraints by setup_peers.sh."
            "$venv/bin/python" -m pip freeze --all --exclude pip --exclude setuptools --exclude wheel
        } >"$REQS/$name.txt"
        stamp="$(cat "$REQS/$name.in" "$REQS/$name.txt" | sha256sum | cut -d' ' -f1)"
    else
        "$venv/bin/python" -m pip install --quiet -r "$REQS/$name.in" -c "$REQS/$name.txt"
    fi
    "$venv/bin/python" -m pip check
    echo "$stamp" >"$venv/.installed"
}

mkdir -p "$VENVS"
PEERS=(mlserver kserve ceilings pytriton litserve)
for name in "${PEERS[@]}"; do
    setup "$name"
done

echo
echo "resolved versions:"
for name in "${PEERS[@]}"; do
    packages="$(sed -n 's/^\([A-Za-z0-9_.-]*\)\(\[[^]]*\]\)\?==.*/\1/p' "$REQS/$name.in" | tr '\n' ' ')"
    # shellcheck disable=SC2086
    printf '  %-9s %s\n' "$name" "$("$VENVS/$name/bin/python" -m pip list --format=freeze 2>/dev/null |
        grep -i -E "^($(echo $packages | tr ' ' '|'))==" | tr '\n' ' ')"
done
if grep -qi '^torch==' "$REQS"/*.txt; then echo "warning: torch is in a resolution" >&2; fi
