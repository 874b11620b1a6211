#!/usr/bin/env bash
# One prepared command for a short lending of ONE GPU with no package registry (`make gpu-lending`, or this
# script where the image has no make). In the repository root, after `make gpu-carry` on the build machine
# and with build/gpu-carry carried:
#   scripts/gpu_lending.sh [--tiny]       (PYTHON=python3 by default; --tiny: the tiny model, the CPU test)
# Parts, in order, each under its own time limit and all of them under LENDING_TOTAL_S (480 s):
#   versions  python / torch / transformers / GPU / driver, libcuda's links     (no limit: seconds)
#   probe     scripts/pixels_probe.py: the training loss moves with the pixels under this transformers
#   prepare   the random Qwen3-VL-2B-shaped model (built on the GPU) next to the carried data
#   profile-sdpa, profile-packed_sdpa   scripts/gpu_profile.py with each attention (no loader sweep)
#   sft_step  scripts/gpu_check.py --only sft_step (one FSDP2 step of the recipe, from an empty output)
# Results (small files only, never a checkpoint) in $OUT/lending (OUT defaults to build/lending-out):
# lending.json / lending.md (status, seconds and limit per part), <part>.log, probe/, profile-*/ (summary,
# trace split into 15 MiB parts: `cat trace.json.gz.part-* > trace.json.gz`), gpu-check/.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
CARRY=${LENDING_CARRY:-build/gpu-carry}
BUILD=${LENDING_BUILD:-build/lending}
TOTAL_S=${LENDING_TOTAL_S:-480}
RESULTS=${OUT:-build/lending-out}/lending
TINY=()
if [ "${1:-}" = "--tiny" ]; then TINY=(--tiny); shift; fi
# per-part limits (s): on an H100 the parts take about 20, 80, 80, 80 and 90 s
declare -A LIMIT=([probe]=60 [prepare]=120 [profile-sdpa]=110 [profile-packed_sdpa]=110 [sft_step]=120)
SCALE=${LENDING_SCALE:-1}  # the CPU test's slower machine: every limit and the total times this
TOTAL_S=$((TOTAL_S * SCALE))

start=$(date +%s)
mkdir -p "$RESULTS" "$BUILD"
: > "$RESULTS/parts.tsv"

if [ -f "$CARRY/site.tar.xz" ]; then  # the project's small dependencies that the image lacks (make gpu-carry)
  mkdir -p "$BUILD/site" && tar -xJf "$CARRY/site.tar.xz" -C "$BUILD/site"
  export PYTHONPATH="$PWD/$BUILD/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1

part() {  # part NAME COMMAND...: run under min(its limit, what is left of TOTAL_S); record the outcome
  local name=$1 limit=$((LIMIT[$1] * SCALE)) left rc t0
  shift
  left=$((TOTAL_S - ($(date +%s) - start)))
  if [ "$limit" -gt "$left" ]; then limit=$left; fi
  if [ "$limit" -lt 5 ]; then
    printf '%s\tskipped\t0\t%s\n' "$name" "$limit" >> "$RESULTS/parts.tsv"
    return
  fi
  t0=$(date +%s%N)
  timeout -k 10 "$limit" "$@" > "$RESULTS/$name.log" 2>&1
  rc=$?
  local status=pass
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then status=timeout; elif [ "$rc" -ne 0 ]; then status="fail($rc)"; fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$((($(date +%s%N) - t0) / 1000000))" "$limit" >> "$RESULTS/parts.tsv"
  tail -c 1000000 "$RESULTS/$name.log" > "$RESULTS/$name.log.tail" && mv "$RESULTS/$name.log.tail" "$RESULTS/$name.log"
}

copy_profile() {  # the profile's small outputs; the trace in parts under the 16 MiB a lending returns per file
  local from=$BUILD/$1 to=$RESULTS/$1
  mkdir -p "$to"
  cp "$from"/summary.json "$from"/summary.md "$to"/ 2>/dev/null
  if [ -f "$from/trace.json.gz" ]; then split -b 15M -d "$from/trace.json.gz" "$to/trace.json.gz.part-"; fi
}

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  "$PY" -c 'import sys, torch, transformers; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda); print("transformers", transformers.__version__); print("gpus", [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -5
  # the image's libcuda links assume the driver under /usr/lib/<multiarch>; some nodes mount it elsewhere
  for f in /usr/lib/x86_64-linux-gnu/libcuda.so* /usr/local/nvidia/lib64/libcuda.so*; do
    [ -e "$f" ] || [ -L "$f" ] && echo "$f -> $(readlink -f "$f") $([ -e "$f" ] && echo ok || echo DANGLING)"
  done
} > "$RESULTS/versions.txt" 2>&1

part probe "$PY" scripts/pixels_probe.py --work "$BUILD/probe" --out "$RESULTS/probe"
part prepare "$PY" scripts/gpu_profile.py --prepare-only "${TINY[@]}" --work "$CARRY/work"
for attn in sdpa packed_sdpa; do
  part "profile-$attn" "$PY" scripts/gpu_profile.py "${TINY[@]}" --work "$CARRY/work" --out "$BUILD/profile-$attn" \
    --docs none --loader-workers none "model.attn_implementation=$attn"
  copy_profile "profile-$attn"
done
part sft_step "$PY" scripts/gpu_check.py "${TINY[@]}" --work "$CARRY/work" --only sft_step
mkdir -p "$RESULTS/gpu-check"
cp "$CARRY/work/gpu-check.json" "$CARRY/work/gpu-check.md" "$RESULTS/gpu-check/" 2>/dev/null

"$PY" - "$RESULTS" "$(($(date +%s) - start))" "$TOTAL_S" <<'EOF'
import json, sys
from pathlib import Path

results, wall, total = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
parts = [dict(zip(("part", "status", "seconds", "limit_s"), line.split("\t"))) for line in
         (results / "parts.tsv").read_text().splitlines()]
for p in parts:
    p["seconds"], p["limit_s"] = round(int(p["seconds"]) / 1000, 1), int(p["limit_s"])  # from ms
profiles = {}
for attn in ("sdpa", "packed_sdpa"):
    path = results / f"profile-{attn}" / "summary.json"
    if path.is_file():
        s = json.loads(path.read_text())
        profiles[attn] = {k: s.get(k) for k in ("tokens_per_s", "mfu", "peak_mem_gib", "gpu_busy_share", "losses")}
probe = results / "probe" / "pixels-probe.json"
report = {"wall_s": wall, "total_limit_s": total, "parts": parts, "profiles": profiles,
          "pixels_probe": json.loads(probe.read_text()) if probe.is_file() else None}
(results / "lending.json").write_text(json.dumps(report, indent=2) + "\n")
lines = ["# GPU lending", "", f"wall {wall} s of {total} s", "", "| part | status | seconds | limit |",
         "|---|---|---|---|", *(f"| {p['part']} | {p['status']} | {p['seconds']} | {p['limit_s']} |" for p in parts)]
lines += ["", *(f"- {a}: {json.dumps(v)}" for a, v in profiles.items())]
(results / "lending.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(0 if parts and all(p["status"] == "pass" for p in parts) else 1)
EOF
