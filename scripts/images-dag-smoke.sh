#!/usr/bin/env bash
# `make images-dag-smoke`: the demo DAG (data -> SFT -> RL -> eval -> report, tiny model, synthetic
# data) through kfp.local.DockerRunner, every task in the images `make images-smoke` built, served by
# podman's Docker-compatible API. Not part of `make test` (needs podman and the built images).
#   IMAGES_SMOKE_TAG (default smoke): the images' tag; PARAVT_IMAGE_RL defaults to the RL image, or
#   to the SFT image when the RL image was not built (the tiny RL run needs no SGLang).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TAG=${IMAGES_SMOKE_TAG:-smoke}
WORK=${IMAGES_SMOKE_DIR:-$ROOT/build/images-smoke}/dag
command -v podman >/dev/null || { echo "images-dag-smoke: podman is not installed (make images-smoke installs it)"; exit 1; }
for fam in sft eval; do
  podman image exists "paravt-$fam:$TAG" || { echo "images-dag-smoke: no paravt-$fam:$TAG; run make images-smoke first"; exit 1; }
done
rl=paravt-rl:$TAG
podman image exists "$rl" || rl=paravt-sft:$TAG

# The Docker SDK kfp's DockerRunner drives, in its own side site (not in the project venv).
SDK=.venv-docker-sdk
[ -d "$SDK/docker" ] || .venv/bin/pip install --quiet --target "$SDK" --no-deps docker==7.1.0
rm -rf "$WORK" && mkdir -p "$WORK"
sock=$WORK/podman.sock
# runc: crun fails on this host's hybrid cgroups (as in images-smoke.sh).
podman --runtime runc system service --time=0 "unix://$sock" &
svc=$!
trap 'kill "$svc" 2>/dev/null || true' EXIT
for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.2; done
umask 000  # the containers run as uid 10001 and write into directories kfp.local creates here
t0=$(date +%s)
DOCKER_HOST="unix://$sock" PYTHONPATH="$SDK:$ROOT" OMP_NUM_THREADS=1 \
PARAVT_IMAGE_SFT="localhost/paravt-sft:$TAG" PARAVT_IMAGE_EVAL="localhost/paravt-eval:$TAG" \
PARAVT_IMAGE_RL="localhost/$rl" \
  .venv/bin/python -c "from pipelines.local import demo_in_images; print(demo_in_images('$WORK/demo').report_uri)"
echo "images-dag-smoke: the demo DAG ran in the images in $(( $(date +%s) - t0 ))s (log: $WORK/demo/demo.log)"
