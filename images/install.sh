#!/bin/sh
# Shared by Dockerfile.sft, Dockerfile.rl and Dockerfile.eval (run as root at build time), in two
# phases so that a code edit rebuilds only the last layers:
#   install.sh deps [--lock-override FILE] [EXTRA_REQUIREMENT_ARGS...]
#       system packages, a Python 3.11 venv at /opt/paravt, the build backend and every third-party
#       dependency of /src/pyproject.toml (plus the image's extras) with images/requirements.lock as
#       constraints, and the non-root user. Needs only pyproject.toml and images/ from the source.
#   install.sh code
#       paravt itself from /src (no dependency resolution, no network), checks, configs, cleanup.
set -eu
phase=${1:?usage: install.sh deps|code ...}
shift
PY=/opt/paravt/bin/python
PIP="/opt/paravt/bin/pip --no-cache-dir --disable-pip-version-check -q"

if [ "$phase" = deps ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    # ffmpeg: the video decoders (torchcodec, PyAV) and the synthetic-data encoder.
    apt-get install -y -q --no-install-recommends python3.11 python3.11-venv ffmpeg ca-certificates
    rm -rf /var/lib/apt/lists/*

    # --lock-override FILE: pins that replace the lock's for the same packages (the RL image's SGLang
    # needs a few other versions); the rest of the arguments are extra pip requirements.
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
    # The project's dependencies and build backend, read from pyproject.toml (no code needed yet).
    $PY - <<'PYEOF' > /tmp/requirements.txt
import tomllib
project = tomllib.load(open("/src/pyproject.toml", "rb"))
print("\n".join(project["build-system"]["requires"] + project["project"]["dependencies"]))
PYEOF
    $PIP install -c "$constraints" -r /tmp/requirements.txt "$@"
    $PY -c "import kfp, torch, transformers"
    rm -f /tmp/requirements.txt /tmp/constraints.txt

    # A fixed numeric uid, so Kubernetes' runAsNonRoot can verify it without a passwd lookup.
    useradd --uid 10001 --user-group --create-home --shell /usr/sbin/nologin paravt
elif [ "$phase" = code ]; then
    # Dependencies are all in the layer below: install only paravt, with the backend installed there.
    $PIP install --no-deps --no-build-isolation /src
    # What the components and the entrypoint need, checked at build time rather than in the first pod.
    $PY -c "import kfp, paravt_core, torch, transformers"
    /opt/paravt/bin/paravt --help >/dev/null
    # Configs travel with the image (recipes per stage), the source tree does not.
    mkdir -p /opt/paravt/share
    if [ -d /src/configs ]; then cp -r /src/configs /opt/paravt/share/configs; fi
    install -m 0755 /src/images/entrypoint.sh /opt/paravt/bin/paravt-entrypoint
    rm -rf /src
else
    echo "install.sh: unknown phase '$phase' (deps or code)" >&2
    exit 2
fi
