#!/usr/bin/env bash
# `make images-smoke`: build the three images with podman (no Docker engine) and run a stage in a
# container, docker-run style. Minutes and several GB: not part of `make test`.
#   scripts/images-smoke.sh [--pinned-base | --fresh-base]   (or IMAGES_SMOKE_BASE=pinned|fresh)
#   --pinned-base (default): the Dockerfiles' BASE_IMAGE, a Debian 12 base made by scripts/base-image.sh
#       (debootstrap from the Debian archive) and pushed to a registry on loopback (Debian's
#       docker-registry, storage under the work dir), pulled by digest. Where that registry does not hold
#       the digest (a fresh machine), the base is made again and pushed, and the build uses the new digest
#       (debootstrap is not bit-reproducible across days; `scripts/base-image.sh --push R --pin` re-pins).
#   --fresh-base: make the base again (debootstrap) and push it, whatever the registry holds.
#  1. Debian's podman/buildah/debootstrap/runc/docker-registry; the base (above), passed as BASE_IMAGE.
#  2. podman build --runtime runc (crun fails on this host's hybrid cgroups), the machine's pip setup
#     (local wheel mirror + CA bundle) bind-mounted read-only into the build: nothing of it stays in the image.
#     The builds' own checks (images/toolchain_check.py): Python.h, Triton's compiler lookup and a built
#     extension; in the RL image nvcc and SGLang's toolchain discovery compiling and linking a kernel.
#  3. `paravt data` in the sft image on synthetic data, outputs to the test S3 server on loopback
#     (--network host, AWS_* env); the outputs are checked from the host, and the uid the stage ran as.
#     Then `<image> <stage> --help` (and `<image> paravt <stage> --help`) for every stage verb.
#  4. A one-line code edit, rebuilt: the time it takes and that the dependency layer came from cache.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=${IMAGES_SMOKE_DIR:-$ROOT/build/images-smoke}
TAG=${IMAGES_SMOKE_TAG:-smoke}
FAMILIES=${IMAGES_SMOKE_FAMILIES:-"sft eval rl"}
BASE_KIND=${IMAGES_SMOKE_BASE:-pinned}
REGISTRY=${IMAGES_SMOKE_REGISTRY:-localhost:5055}
for arg in "$@"; do
  case "$arg" in
    --pinned-base) BASE_KIND=pinned ;;
    --fresh-base) BASE_KIND=fresh ;;
    *) echo "usage: $0 [--pinned-base | --fresh-base]"; exit 2 ;;
  esac
done
PY=.venv/bin/python
RUN_FLAGS=(--runtime runc --ulimit nofile=20000:20000 --ulimit nproc=32768:32768)
mkdir -p "$WORK"
t0=$(date +%s)
say() { echo "[images-smoke $(( $(date +%s) - t0 ))s] $*"; }

need=()
for pkg in podman buildah debootstrap runc docker-registry skopeo; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

case "$BASE_KIND" in pinned|fresh) ;; *) echo "images-smoke: unknown base '$BASE_KIND' (pinned, fresh)"; exit 2 ;; esac
# The registry on loopback that holds the base (TLS off: loopback only).
TLS=(--tls-verify=false)
if ! curl -sf "http://$REGISTRY/v2/" >/dev/null; then
  mkdir -p "$WORK/registry"
  cat >"$WORK/registry.yml" <<EOF
version: 0.1
storage: {filesystem: {rootdirectory: $WORK/registry}}
http: {addr: $REGISTRY}
log: {level: warn}
EOF
  say "starting docker-registry on $REGISTRY"
  docker-registry serve "$WORK/registry.yml" >"$WORK/registry.log" 2>&1 &
  for _ in $(seq 50); do curl -sf "http://$REGISTRY/v2/" >/dev/null && break; sleep 0.2; done
fi
# The default of the Dockerfiles' BASE_IMAGE argument (the same in all three: a test checks it).
BASE=$(sed -n 's/^ARG BASE_IMAGE=//p' Dockerfile.sft)
if [ "$BASE_KIND" = fresh ] || ! skopeo inspect "${TLS[@]}" "docker://$BASE" >/dev/null 2>&1; then
  # untag, not rmi: the built images keep their layers; base-image.sh then makes a new one.
  if [ "$BASE_KIND" = fresh ]; then podman untag localhost/paravt-base:bookworm >/dev/null 2>&1 || true; fi
  say "making the base (scripts/base-image.sh) and pushing it to $REGISTRY"
  BASE=$(BASE_IMAGE_DIR="$WORK/base" scripts/base-image.sh --push "$REGISTRY" "${TLS[@]}")
fi
say "base image: $BASE"

# pip inside the build: this machine's mirror and CA bundle, mounted read-only for the RUN only.
mkdir -p "$WORK/pip"
cat >"$WORK/pip/pip.conf" <<EOF
[global]
cert = /etc/paravt-build/ca.crt
extra-index-url = file:///opt/pypi/simple file:///opt/pypi-more/simple
find-links = /opt/wheels
constraint = /etc/xdg/pip/constraints.txt
timeout = 180
EOF
MOUNTS=(-v "$WORK/pip/pip.conf:/etc/pip.conf:ro" -v /etc/ssl/certs/ca-certificates.crt:/etc/paravt-build/ca.crt:ro)
for d in /opt/pypi /opt/pypi-more /opt/wheels /etc/xdg/pip; do
  [ -e "$d" ] && MOUNTS+=(-v "$d:$d:ro")
done

# Build context: the committed tree at HEAD (what VCS_REF names), not the working directory.
rm -rf "$WORK/context" && mkdir -p "$WORK/context"
git archive --format=tar HEAD | tar -x -C "$WORK/context"
for fam in $FAMILIES; do
  say "building paravt-$fam:$TAG"
  s=$(date +%s)
  podman build --runtime runc --network host "${TLS[@]}" "${MOUNTS[@]}" \
    --build-arg BASE_IMAGE="$BASE" --build-arg VCS_REF="$(git rev-parse HEAD)" \
    -f "$WORK/context/Dockerfile.$fam" -t "paravt-$fam:$TAG" "$WORK/context" >"$WORK/build-$fam.log" 2>&1 \
    || { tail -30 "$WORK/build-$fam.log"; exit 1; }
  say "built paravt-$fam:$TAG in $(( $(date +%s) - s ))s"
done

say "synthetic data + test S3 server"
rm -rf "$WORK/synth" "$WORK/s3"
$PY -m paravt_core.cli synth "$WORK/synth" --videos 4 --seconds 6 >/dev/null
eval "$($PY -m tests.support.s3server start --dir "$WORK/s3")"
trap '$PY -m tests.support.s3server stop --dir "$WORK/s3" >/dev/null 2>&1 || true' EXIT
BUCKET=s3://images-smoke
$PY - <<EOF
from paravt_core import storage
storage.s3_client().create_bucket(Bucket="${BUCKET#s3://}")
EOF
cat >"$WORK/data.yaml" <<EOF
work_dir: /tmp/work
output: $BUCKET/data
download: {media_source: /data/source, parquet_source: /data/parquet}
materialize: {media_prefix: $BUCKET/media}
EOF

say "podman run paravt-sft:$TAG data (outputs to $BUCKET)"
podman run --rm "${RUN_FLAGS[@]}" --network host \
  -e AWS_ENDPOINT_URL -e AWS_ACCESS_KEY_ID -e AWS_SECRET_ACCESS_KEY -e AWS_DEFAULT_REGION \
  -v "$WORK/synth:/data:ro" -v "$WORK/data.yaml:/cfg/data.yaml:ro" \
  "paravt-sft:$TAG" data --config /cfg/data.yaml >"$WORK/run-data.log" 2>&1 \
  || { tail -30 "$WORK/run-data.log"; exit 1; }
$PY - <<EOF
import json
from paravt_core import storage
out = "$BUCKET/data"
assert storage.is_complete(out), "no _COMPLETE marker"
audit = json.loads(storage.read_bytes(storage.join(out, "audit.json")))
assert audit["totals"]["passed"] and audit["totals"]["kept"] == audit["totals"]["rows"] > 0, audit["totals"]
print(f"data stage in the container: {audit['totals']['rows']} rows kept, outputs complete in {out}")
EOF
uid=$(podman run --rm "${RUN_FLAGS[@]}" --entrypoint id "paravt-sft:$TAG" -u)
[ "$uid" = 10001 ] || { echo "container ran as uid $uid, expected 10001"; exit 1; }
say "the stage ran as uid $uid"

for fam in $FAMILIES; do
  verbs=$(cd "$WORK/context" && PYTHONPATH=. "$ROOT/$PY" - "$fam" <<'EOF'
import importlib, importlib.util, pathlib, sys
from components import images
family_image = images.image(sys.argv[1])
verbs = set()
for path in pathlib.Path("components").glob("*.py"):
    if path.stem in {"__init__", "images", "locations"}:
        continue
    module = importlib.import_module(f"components.{path.stem}")
    for name, op in vars(module).items():
        if name.endswith("_op") and op.component_spec.implementation.container.image == family_image:
            # A component written ahead of its stage (not in this tree yet) has no verb to check.
            if importlib.util.find_spec(f"paravt_core.{path.stem}") is not None:
                verbs.add(path.stem)
print(" ".join(sorted(verbs)))
EOF
)
  podman run --rm "${RUN_FLAGS[@]}" "paravt-$fam:$TAG" >/dev/null || { echo "paravt-$fam: paravt --help failed"; exit 1; }
  for verb in $verbs; do
    podman run --rm "${RUN_FLAGS[@]}" "paravt-$fam:$TAG" "$verb" --help >/dev/null \
      || { echo "paravt-$fam: 'paravt $verb --help' failed"; exit 1; }
    podman run --rm "${RUN_FLAGS[@]}" "paravt-$fam:$TAG" paravt "$verb" --help >/dev/null \
      || { echo "paravt-$fam: '<image> paravt $verb --help' failed"; exit 1; }
    say "paravt-$fam:$TAG: paravt $verb --help ok"
  done
done

# A code edit rebuilds only the layers after the dependency install (Dockerfiles: deps before code).
fam=$(echo "$FAMILIES" | awk '{print $1}')
echo "# images-smoke code edit" >> "$WORK/context/paravt_core/__init__.py"
s=$(date +%s)
podman build --runtime runc --network host "${TLS[@]}" "${MOUNTS[@]}" \
  --build-arg BASE_IMAGE="$BASE" --build-arg VCS_REF="$(git rev-parse HEAD)" \
  -f "$WORK/context/Dockerfile.$fam" -t "paravt-$fam:$TAG-edit" "$WORK/context" >"$WORK/rebuild-$fam.log" 2>&1 \
  || { tail -30 "$WORK/rebuild-$fam.log"; exit 1; }
rebuild=$(( $(date +%s) - s ))
# podman prints "--> Using cache" for each step it did not run; the deps RUN is the 3rd step after FROM.
grep -A1 "install.sh deps" "$WORK/rebuild-$fam.log" | grep -q "Using cache" \
  || { echo "the dependency layer was rebuilt after a code edit"; tail -30 "$WORK/rebuild-$fam.log"; exit 1; }
say "code edit: paravt-$fam rebuilt in ${rebuild}s, dependency layer from cache"
podman rmi "paravt-$fam:$TAG-edit" >/dev/null

say "done in $(( $(date +%s) - t0 ))s; image sizes:"
podman images --format '{{.Repository}}:{{.Tag}}  {{.Size}}' | grep -E "paravt-(sft|rl|eval):$TAG|paravt-base"
