#!/bin/sh
# Shared by Dockerfile.sft, Dockerfile.rl and Dockerfile.eval (run once, as root, at build time):
# system packages, a Python 3.11 venv at /opt/paravt, paravt installed once from the repository copy
# in /src with images/requirements.lock as constraints (plus the image's extra requirements, given as
# arguments), and the non-root user the container runs as.
set -eu

export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# ffmpeg: the video decoders (torchcodec, PyAV) and the synthetic-data encoder.
apt-get install -y -q --no-install-recommends python3.11 python3.11-venv ffmpeg ca-certificates
rm -rf /var/lib/apt/lists/*

python3.11 -m venv /opt/paravt
/opt/paravt/bin/pip install --no-cache-dir --disable-pip-version-check -q \
    -c /src/images/requirements.lock /src "$@"
# What the components and the entrypoint need, checked at build time rather than in the first pod.
/opt/paravt/bin/python -c "import kfp, paravt_core, torch, transformers"
/opt/paravt/bin/paravt --help >/dev/null

# Configs travel with the image (recipes per stage), the source tree does not.
mkdir -p /opt/paravt/share
if [ -d /src/configs ]; then cp -r /src/configs /opt/paravt/share/configs; fi
rm -rf /src

# A fixed numeric uid, so Kubernetes' runAsNonRoot can verify it without a passwd lookup.
useradd --uid 10001 --user-group --create-home --shell /usr/sbin/nologin paravt
