#!/usr/bin/env bash
# `make gpu-carry`, on the build machine: everything a one-GPU lending needs besides the repository, in one
# folder to carry (build/gpu-carry, under 50 MiB):
#   site.tar.xz  the project's small dependencies that the GPU image lacks (scripts/gpu_carry.txt), installed
#                for its Python (GPU_PY_VERSION, 3.12) with --no-deps and packed with xz (wheels are
#                zip-deflated: ~57 MB as wheels, ~45 MB as one xz stream); gpu_lending.sh unpacks it and puts
#                it on PYTHONPATH. Before packing, scripts/carry_check.py resolves every requirement of the
#                installed site against the carry and images/gpu-lending-image.txt: a carry that would fail
#                at import on the image is never built. No ffmpeg-python / future: synth (their only user)
#                is imported only where data is built.
#   work/data, work/data-work   the synthetic data through the data stage (rows re-pointed on arrival).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
CARRY=${LENDING_CARRY:-build/gpu-carry}
GPU_PY_VERSION=${GPU_PY_VERSION:-3.12}
LIMIT_MIB=50
rm -rf "$CARRY" && mkdir -p "$CARRY/work"
"$PY" -m pip install -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version "$GPU_PY_VERSION" \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --target "$CARRY/site" -r scripts/gpu_carry.txt 2>&1 \
  | grep -v "is ignored: it is neither a file nor a directory" || true
rm -rf "$CARRY/site/bin"
"$PY" scripts/carry_check.py --site "$CARRY/site"
tar -C "$CARRY/site" -cf - . | xz -T0 -6 > "$CARRY/site.tar.xz"
rm -rf "$CARRY/site"
"$PY" scripts/gpu_profile.py --prepare-only --tiny --work "$CARRY/work" >/dev/null
rm -rf "$CARRY/work/synth" "$CARRY/work/tiny-model"  # rebuilt there if needed
size=$(du -sm "$CARRY" | cut -f1)
echo "[gpu-carry] $CARRY: ${size} MiB (limit ${LIMIT_MIB}); carry list: [\"$CARRY\"]"
du -sh "$CARRY"/* "$CARRY"/work/*
[ "$size" -lt "$LIMIT_MIB" ] || { echo "[gpu-carry] over ${LIMIT_MIB} MiB" >&2; exit 1; }
