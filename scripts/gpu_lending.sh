#!/usr/bin/env bash
# One prepared command for a short lending of ONE GPU with no package registry (`make gpu-lending`, or this
# script where the image has no make). In the repository root, after `make gpu-carry` on the build machine
# and with build/gpu-carry carried:
#   scripts/gpu_lending.sh [--tiny]       (PYTHON=python3 by default; --tiny: the tiny model, the CPU test)
# Parts, most wanted first, each under its own limit and all under LENDING_TOTAL_S (420 s: a lending is 15
# minutes of device time with the machine's start, so a second try still fits); a part that would start with
# under 5 s left is skipped. LENDING_PARTS="a b" runs only those (a second try of what failed).
#   versions   python / torch / CUDA / cuDNN / transformers / the carry as imported / driver / libcuda / every
#              installed package, and the carry's requirements against this image (scripts/lending_report.py)
#   probe      scripts/pixels_probe.py: the training loss moves with the pixels under this transformers
#   prepare    the random Qwen3-VL-2B-shaped model (built on the GPU) next to the carried data
#   profile-*  scripts/gpu_profile.py (no loader sweep, no checkpoint): packed_sdpa with the flash-first SDPA
#              dispatch (the default), packed_sdpa with torch's own dispatch (cuDNN first on sm90), sdpa
#   sft_step   scripts/gpu_check.py --only sft_step: torchrun, FSDP2, one step and its checkpoint (~22 GB at 2B,
#              disk-bound): last, so its write cannot crowd out a measurement
# Results: at most 8 files directly in $OUT (OUT defaults to build/lending-out), and the summary on stdout:
# summary.md, results.json, logs.tar.gz, trace-<profile>.json.gz.part-NN (scripts/lending_report.py).
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
CARRY=${LENDING_CARRY:-build/gpu-carry}
BUILD=${LENDING_BUILD:-build/lending}
TOTAL_S=${LENDING_TOTAL_S:-420}
OUT=${OUT:-build/lending-out}
TINY=()
if [ "${1:-}" = "--tiny" ]; then TINY=(--tiny); shift; fi
ORDER=(versions probe prepare profile-packed_sdpa profile-packed_sdpa-auto profile-sdpa sft_step)
# per-part limits (s), from the H200 estimates (docs/gpu-profile.md): probe ~20, prepare ~80, a profile
# 80 (flash) to 200 (cuDNN's plan per new length), sft_step 80-115 with its checkpoint
declare -A LIMIT=([versions]=30 [probe]=45 [prepare]=100 [profile-packed_sdpa]=130 [profile-packed_sdpa-auto]=200
  [profile-sdpa]=130 [sft_step]=130)
declare -A OVERRIDES=(
  [profile-packed_sdpa]="model.attn_implementation=packed_sdpa model.sdpa_backend=flash"
  [profile-packed_sdpa-auto]="model.attn_implementation=packed_sdpa model.sdpa_backend=auto"
  [profile-sdpa]="model.attn_implementation=sdpa"
)
SCALE=${LENDING_SCALE:-1}  # the CPU test's slower machine: every limit and the total times this
TOTAL_S=$((TOTAL_S * SCALE))
read -r -a WANTED <<< "${LENDING_PARTS:-${ORDER[*]}}"

start=$(date +%s)
rm -rf "$BUILD/logs" "$BUILD/probe" "$BUILD"/profile-* "$BUILD/gpu-check" "$BUILD/versions.json"
rm -f "$CARRY/work/gpu-check.json" "$CARRY/work/gpu-check.md"  # an earlier run's report is not this one's
mkdir -p "$OUT" "$BUILD/logs"
: > "$BUILD/parts.tsv"

SITE=()
if [ -f "$CARRY/site.tar.xz" ]; then  # the project's small dependencies that the image lacks (make gpu-carry)
  rm -rf "$BUILD/site" && mkdir -p "$BUILD/site" && tar -xJf "$CARRY/site.tar.xz" -C "$BUILD/site"
  export PYTHONPATH="$PWD/$BUILD/site${PYTHONPATH:+:$PYTHONPATH}"
  SITE=(--site "$BUILD/site")
fi
export PYTHONUNBUFFERED=1

part() {  # part NAME COMMAND...: run under min(its limit, what is left of TOTAL_S); record the outcome
  local name=$1 limit=$((LIMIT[$1] * SCALE)) left rc t0 status
  shift
  if [[ " ${WANTED[*]} " != *" $name "* ]]; then return; fi
  left=$((TOTAL_S - ($(date +%s) - start)))
  if [ "$limit" -gt "$left" ]; then limit=$left; fi
  if [ "$limit" -lt 5 ]; then
    printf '%s\tskipped\t0\t%s\t%s\n' "$name" "$limit" "${OVERRIDES[$name]:-}" >> "$BUILD/parts.tsv"
    return
  fi
  echo "[lending] $name (limit ${limit} s)"
  t0=$(date +%s%N)
  timeout -k 10 "$limit" "$@" > "$BUILD/logs/$name.log" 2>&1
  rc=$?
  status=pass
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then status=timeout; elif [ "$rc" -ne 0 ]; then status="fail($rc)"; fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$((($(date +%s%N) - t0) / 1000000))" "$limit" \
    "${OVERRIDES[$name]:-}" >> "$BUILD/parts.tsv"
  tail -c 1000000 "$BUILD/logs/$name.log" > "$BUILD/logs/$name.tail" && mv "$BUILD/logs/$name.tail" "$BUILD/logs/$name.log"
  echo "[lending] $name: $status"
}

part versions "$PY" scripts/lending_report.py versions --build "$BUILD" "${SITE[@]}"
part probe "$PY" scripts/pixels_probe.py --work "$BUILD/probe-work" --out "$BUILD/probe"
part prepare "$PY" scripts/gpu_profile.py --prepare-only "${TINY[@]}" --work "$CARRY/work"
for name in profile-packed_sdpa profile-packed_sdpa-auto profile-sdpa; do
  read -r -a extra <<< "${OVERRIDES[$name]}"
  part "$name" "$PY" scripts/gpu_profile.py "${TINY[@]}" --work "$CARRY/work" --out "$BUILD/$name" \
    --docs none --loader-workers none "${extra[@]}"
done
part sft_step "$PY" scripts/gpu_check.py "${TINY[@]}" --work "$CARRY/work" --only sft_step
mkdir -p "$BUILD/gpu-check"
cp "$CARRY/work/gpu-check.json" "$CARRY/work/gpu-check.md" "$BUILD/gpu-check/" 2>/dev/null

"$PY" scripts/lending_report.py report --build "$BUILD" --out "$OUT" --wall "$(($(date +%s) - start))" \
  --total "$TOTAL_S"
