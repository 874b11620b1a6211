#!/usr/bin/env bash
# Set up everything `make demo` / `make test` need on a fresh Debian machine; safe to rerun.
#  1. Debian packages: ffmpeg (videos) and Ceph (mon, osd, radosgw: the test S3 server).
#  2. .venv with the pinned Python stack (torch comes from the machine's local wheel mirror).
#  3. .venv-bench/lmms-eval-site: lmms-eval 0.7.3 (+ its logger, loguru) installed --no-deps, outside the venv:
#     its task scorers are the oracle of tests/test_eval_oracle.py and `make bench-scoring`.
set -euo pipefail
cd "$(dirname "$0")/.."

DEB_PACKAGES=(ffmpeg ceph-mon ceph-osd radosgw)
PYTHON=${PYTHON:-python3.11}

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
LMMS_SITE=.venv-bench/lmms-eval-site
if [ ! -f "$LMMS_SITE/lmms_eval-0.7.3.dist-info/METADATA" ]; then
  echo "[setup] installing lmms-eval 0.7.3 (--no-deps) into $LMMS_SITE"
  .venv/bin/pip install -q --disable-pip-version-check --target "$LMMS_SITE" --no-deps \
    lmms-eval==0.7.3 loguru==0.7.3 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
  test -f "$LMMS_SITE/lmms_eval/tasks/_task_utils/mcq_extract.py" # fail here, not in the oracle test
fi
echo "[setup] ready"
