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

# --lock-override FILE: pins that replace the lock's for the same packages (the RL image's SGLang needs
# a few other versions); the rest of the arguments are extra pip requirements.
constraints=/src/images/requirements.lock
if [ "${1:-}" = "--lock-override" ]; then
    names=$(sed -n 's/^\([A-Za-z0-9_.-]*\)==.*/\1/p' "$2" | tr 'A-Z_' 'a-z-')
    awk -v names="$names" 'BEGIN { n = split(names, a, "\n"); for (i = 1; i <= n; i++) skip[a[i]] = 1 }
        { split($0, f, "=="); k = tolower(f[1]); gsub("_", "-", k); if (!(k in skip)) print }' \
        /src/images/requirements.lock > /tmp/constraints.txt
    grep -v '^#' "$2" >> /tmp/constraints.txt
    constraints=/tmp/constraints.txt
    shift 2
fi

python3.11 -m venv /opt/paravt
/opt/paravt/bin/pip install --no-cache-dir --disable-pip-version-check -q -c "$constraints" /src "$@"
# What the components and the entrypoint need, checked at build time rather than in the first pod.
/opt/paravt/bin/python -c "import kfp, paravt_core, torch, transformers"
/opt/paravt/bin/paravt --help >/dev/null

# Configs travel with the image (recipes per stage), the source tree does not.
mkdir -p /opt/paravt/share
if [ -d /src/configs ]; then cp -r /src/configs /opt/paravt/share/configs; fi
rm -rf /src

# A fixed numeric uid, so Kubernetes' runAsNonRoot can verify it without a passwd lookup.
useradd --uid 10001 --user-group --create-home --shell /usr/sbin/nologin paravt
