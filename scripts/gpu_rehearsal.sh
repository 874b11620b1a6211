#!/usr/bin/env bash
# `make gpu-rehearsal`: the GPU lending rehearsed on this CPU machine, on a stand-in of the lent image, before
# any device time is spent. Not in `make test`: it downloads the image's torch (~4.5 GB, a CUDA build).
#   1. .venv-gpu-rehearsal from pyenv's Python 3.12 with the image's recorded versions
#      (images/gpu-lending-image.txt: torch, torchvision, transformers, triton, numpy, safetensors, tokenizers,
#      huggingface-hub), typing-extensions 4.12.2 (the old version that once broke the carry at import) and
#      the project's dependencies that the image lists without a version (pip's choice of those);
#      of what pip adds, only what the image lists is kept;
#   2. `make gpu-carry` (the carry's requirements checked against the image's list);
#   3. scripts/gpu_lending.sh --tiny with that venv's Python and only the carry on top, on the CPU;
#   4. at most 8 files in its $OUT, every part passed.
# REHEARSAL_PYTHON picks another Python 3.12; REHEARSAL_SCALE (8) scales the lending's limits to this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY312=${REHEARSAL_PYTHON:-$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python 2>/dev/null | sort -V | tail -n 1)}
VENV=.venv-gpu-rehearsal
IMAGE=images/gpu-lending-image.txt
OUT=build/rehearsal-out
[ -x "$PY312" ] || { echo "[gpu-rehearsal] no Python 3.12 (pyenv's, or REHEARSAL_PYTHON)" >&2; exit 1; }
pins=()
for name in torch torchvision transformers triton numpy safetensors tokenizers huggingface-hub; do
  pin=$(grep -E "^$name==" "$IMAGE") || { echo "[gpu-rehearsal] $IMAGE has no version of $name" >&2; exit 1; }
  pins+=("$pin")
done
pins+=(typing-extensions==4.12.2)
# what else the project needs that the image lists without a version (pyarrow, pyyaml, pillow, ...)
read -r -a declared <<< "$("$PY312" -I scripts/gpu_rehearsal_extra.py declared "$IMAGE")"
pins+=("${declared[@]}")
if [ ! -x "$VENV/bin/python" ]; then
  echo "[gpu-rehearsal] $VENV from $PY312 ($("$PY312" -V))"
  "$PY312" -m venv "$VENV"
fi
echo "[gpu-rehearsal] the image's packages: ${pins[*]}"
"$VENV/bin/pip" install -q --disable-pip-version-check "${pins[@]}"
# pip brings what the packages declare; the image lacks some of it (transformers 5.17 declares pydantic, the image
# lists none): the stand-in keeps only what the image lists, so the carry has to bring the rest, as it will there
extra=$("$VENV/bin/python" -I scripts/gpu_rehearsal_extra.py extra "$IMAGE")
if [ -n "$extra" ]; then
  echo "[gpu-rehearsal] not in the image's list, removed from the stand-in: $extra"
  # shellcheck disable=SC2086
  "$VENV/bin/pip" uninstall -q -y $extra
fi
"$VENV/bin/python" -I -c 'import sys; from importlib.metadata import version as v; print(f"[gpu-rehearsal] stand-in: Python {sys.version.split()[0]}, " + ", ".join(f"{n} {v(n)}" for n in ("torch", "torchvision", "transformers", "triton", "typing_extensions")))'
PYTHON=.venv/bin/python scripts/gpu_carry.sh
rm -rf "$OUT" build/rehearsal
t0=$(date +%s)
set +e
CUDA_VISIBLE_DEVICES="" OMP_NUM_THREADS=1 PYTHON="$VENV/bin/python" OUT="$OUT" LENDING_BUILD=build/rehearsal \
  LENDING_SCALE=${REHEARSAL_SCALE:-8} PYTHONPATH="" scripts/gpu_lending.sh --tiny
rc=$?
set -e
files=$(find "$OUT" -type f | wc -l)
echo "[gpu-rehearsal] lending rc $rc in $(($(date +%s) - t0)) s; $files files in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
[ "$files" -le 8 ] || { echo "[gpu-rehearsal] more than 8 files in $OUT" >&2; exit 1; }
exit "$rc"
