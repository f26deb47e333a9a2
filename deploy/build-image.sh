#!/usr/bin/env bash
# Build rosettaserve's image in its flavours and prove each one serves: run it with podman,
# publish its HTTP port on loopback, and send it an inference.
#
#   deploy/build-image.sh                 # both flavours: slim and llm
#   FLAVOURS=slim deploy/build-image.sh   # one
#   NO_SMOKE=1 deploy/build-image.sh      # build only
#
# Base image: BASE_IMAGE (docker.io/library/debian:bookworm-slim) when it can be pulled;
# otherwise a Debian bookworm root filesystem made with mmdebstrap from the Debian archive,
# imported as localhost/rosettaserve-base:bookworm (deploy/README.md says why and how).
# Needs podman and, for that fallback, mmdebstrap: as root, missing ones are installed with
# apt-get. Heavy (a few minutes, a few GB for llm): not part of `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."

FLAVOURS=${FLAVOURS:-"slim llm"}
IMAGE=${IMAGE:-localhost/rosettaserve}
BASE_IMAGE=${BASE_IMAGE:-docker.io/library/debian:bookworm-slim}
LOCAL_BASE=localhost/rosettaserve-base:bookworm
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
WORK=${WORK:-/var/tmp/rosettaserve-image}
SMOKE_PORT=${SMOKE_PORT:-18080}

say() { printf '== %s\n' "$*" >&2; }

need_tools() {
  local missing=()
  command -v podman >/dev/null || missing+=(podman buildah)
  command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
  if [ ${#missing[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || { say "install: ${missing[*]}"; exit 1; }
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  fi
}

# Where the kernel mounts cgroup v1 and v2 side by side with controllers on v2 ("hybrid"),
# crun refuses to start containers; runc copes. And where the container manager lacks
# CAP_SYS_RESOURCE, the default rlimits podman asks for (above the current hard limits)
# cannot be set: ask for the current ones instead. Both go to a containers.conf of our own
# (podman run and podman build both read it), the machine's configuration is left alone.
RUN_OPTS=()
runtime_options() {
  mkdir -p "$WORK"
  local conf=$WORK/containers.conf nproc
  nproc=$(ulimit -Hu); [ "$nproc" = unlimited ] && nproc=65536
  [ "$nproc" -gt 8192 ] && nproc=8192
  {
    echo "[containers]"
    echo "default_ulimits = [\"nofile=$(ulimit -Hn):$(ulimit -Hn)\", \"nproc=$nproc:$nproc\"]"
    if grep -qs . /sys/fs/cgroup/unified/cgroup.controllers; then
      command -v runc >/dev/null || apt-get install -y -qq runc >&2
      echo "[engine]"
      echo 'runtime = "runc"'
    fi
  } > "$conf"
  export CONTAINERS_CONF=$conf
  RUN_OPTS+=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit "nproc=$nproc:$nproc")
}

base_image() {
  if timeout 120 podman pull -q "$BASE_IMAGE" >/dev/null 2>&1; then
    echo "$BASE_IMAGE"; return
  fi
  say "cannot pull $BASE_IMAGE: building the base from a Debian bookworm root filesystem"
  if ! podman image exists "$LOCAL_BASE"; then
    mkdir -p "$WORK"
    mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
      bookworm "$WORK/bookworm-rootfs.tar" "$DEBIAN_MIRROR" >&2
    podman import --change 'CMD ["/bin/bash"]' "$WORK/bookworm-rootfs.tar" "$LOCAL_BASE" >&2
    rm -f "$WORK/bookworm-rootfs.tar"
  fi
  echo "$LOCAL_BASE"
}

# the build stage's optional inputs: torch's CPU wheel where this machine keeps one, and the
# CA certificates this machine adds (a proxy's) for the build's downloads
context_extra() {
  local extra=deploy/context-extra
  rm -rf "$extra/wheels" "$extra/ca"; mkdir -p "$extra/wheels" "$extra/ca"
  local dir
  for dir in ${PIP_FIND_LINKS:-} /opt/wheels; do
    [ -d "$dir" ] && find "$dir" -maxdepth 1 -name 'torch-2.13.0+cpu-*.whl' -exec cp {} "$extra/wheels/" \;
  done
  find /usr/local/share/ca-certificates -name '*.crt' -exec cp {} "$extra/ca/" \; 2>/dev/null || true
}

build() {
  local flavour=$1 base=$2
  say "building $IMAGE:$flavour from $base"
  local args=(--build-arg "BASE_IMAGE=$base" --build-arg "FLAVOUR=$flavour")
  # a local torch CPU wheel: no need of PyTorch's own index (it may be out of reach)
  ls deploy/context-extra/wheels/torch-2.13.0+cpu-*.whl >/dev/null 2>&1 && args+=(--build-arg TORCH_INDEX=)
  podman build "${RUN_OPTS[@]}" --network host --format docker -f deploy/Dockerfile \
    "${args[@]}" -t "$IMAGE:$flavour" .
}

# run the image on a model repository, publish its HTTP port on loopback, POST one inference
smoke() {
  local flavour=$1 repo name=rosettaserve-smoke-$1
  repo=$(mktemp -d)
  if [ "$flavour" = llm ]; then
    cp -r examples/models/tiny_llama "$repo/"
  else
    cp -r examples/models/mlp_onnx examples/models/half_plus_two "$repo/"
  fi
  chmod -R a+rX "$repo"
  podman rm -f "$name" >/dev/null 2>&1 || true
  podman run "${RUN_OPTS[@]}" -d --name "$name" -p "127.0.0.1:$SMOKE_PORT:8080" \
    -e ROSETTASERVE_HEALTH_URL=http://127.0.0.1:8080/v2/health/ready \
    -v "$repo:/mnt/models:ro" "$IMAGE:$flavour" --http-port 8080 --grpc-port 8081 >/dev/null
  trap 'podman rm -f '"$name"' >/dev/null 2>&1 || true; rm -rf '"$repo" RETURN
  local url=http://127.0.0.1:$SMOKE_PORT i
  for i in $(seq 1 120); do
    curl -sf "$url/v2/health/ready" >/dev/null && break
    [ "$i" = 120 ] && { podman logs "$name" >&2; say "$flavour: never ready"; return 1; }
    sleep 1
  done
  say "$flavour: ready; $(podman exec "$name" id)"
  if [ "$flavour" = llm ]; then
    curl -sf "$url/v1/completions" -H 'content-type: application/json' \
      -d '{"model": "tiny_llama", "prompt": "The quick brown", "max_tokens": 8, "temperature": 0}'
  else
    curl -sf "$url/v2/models/half_plus_two/infer" -H 'content-type: application/json' \
      -d '{"inputs": [{"name": "x", "datatype": "FP32", "shape": [3], "data": [1, 2, 5]}]}'
  fi
  echo
  podman stop -t 30 "$name" >/dev/null
  say "$flavour: stopped with SIGTERM, exit code $(podman inspect -f '{{.State.ExitCode}}' "$name")"
}

need_tools
runtime_options
base=$(base_image)
context_extra
for flavour in $FLAVOURS; do
  build "$flavour" "$base"
  [ -n "${NO_SMOKE:-}" ] || smoke "$flavour"
done
rm -rf deploy/context-extra/wheels deploy/context-extra/ca
podman images --filter "reference=$IMAGE" --format '{{.Repository}}:{{.Tag}} {{.Size}}'
