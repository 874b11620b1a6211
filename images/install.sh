#!/bin/sh
# Shared by Dockerfile.sft, Dockerfile.rl and Dockerfile.eval (run as root at build time), in two
# phases so that a code edit rebuilds only the last layers:
#   install.sh deps [--lock-override FILE] [EXTRA_REQUIREMENT_ARGS...]
#       system packages, a Python 3.11 venv at /opt/paravt, the build backend and every third-party
#       dependency of /src/pyproject.toml (plus the image's extras) with images/requirements.lock as
#       constraints, and the non-root user. Needs only pyproject.toml and images/ from the source.
#   install.sh code [--sglang]
#       paravt itself from /src (no dependency resolution, no network), checks (images/toolchain_check.py;
#       --sglang: also nvcc and SGLang's JIT toolchain), configs, cleanup.
#   install.sh vllm [VERSION]
#       the eval image's vLLM server in its own venv at /opt/vllm (nothing when VERSION is empty).
set -eu
phase=${1:?usage: install.sh deps|code ...}
shift
PY=/opt/paravt/bin/python
PIP="/opt/paravt/bin/pip --no-cache-dir --disable-pip-version-check -q"

if [ "$phase" = deps ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    # ffmpeg: the video decoders (torchcodec, PyAV) and the synthetic-data encoder. python3.11-dev, gcc,
    # g++, libc6-dev: Triton builds its launcher with a C compiler and Python.h at first use, SGLang's JIT
    # kernels (nvcc) hand host code to `c++`. libibverbs1 + ibverbs-providers: InfiniBand userspace, so
    # multi-node NCCL uses the fabric instead of falling back to TCP sockets.
    apt-get install -y -q --no-install-recommends python3.11 python3.11-venv python3.11-dev gcc g++ libc6-dev \
        ffmpeg ca-certificates libibverbs1 ibverbs-providers
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

    # CUDA_HOME (the Dockerfiles' ENV) is the pip wheels' CUDA root (torch's cuda-toolkit; in the RL
    # image also its nvcc and cccl extras). What the CUDA toolkit's own layout has and the wheels lack:
    # lib64 (SGLang links -L$CUDA_HOME/lib64 -lcudart), the unversioned libcudart.so, and libcuda.so for
    # -lcuda, in lib64/stubs (where SGLang looks) and next to libcuda.so.1 (where Triton looks). They
    # point at libcuda.so.1, which the node's driver brings at run time (NVIDIA container toolkit).
    test -f "$CUDA_HOME/lib/libcudart.so.13"
    ln -sfn lib "$CUDA_HOME/lib64"
    ln -sf libcudart.so.13 "$CUDA_HOME/lib/libcudart.so"
    multiarch=/usr/lib/$(gcc -print-multiarch)
    mkdir -p "$CUDA_HOME/lib/stubs"
    ln -sf "$multiarch/libcuda.so.1" "$CUDA_HOME/lib/stubs/libcuda.so"
    ln -sf libcuda.so.1 "$multiarch/libcuda.so"

    # A fixed numeric uid, so Kubernetes' runAsNonRoot can verify it without a passwd lookup.
    useradd --uid 10001 --user-group --create-home --shell /usr/sbin/nologin paravt
    # Its ~/.cache exists and is its own: a volume mounted below it (the RL step's kernel cache at
    # ~/.cache/kernels) would otherwise make the runtime create ~/.cache as root, mode 755 (runc v1.3.6,
    # libcontainer/rootfs_linux.go: MkdirAllInRoot(..., 0o755)), and the stage could not create its caches.
    install -d -o 10001 -g 10001 -m 0755 /home/paravt/.cache /home/paravt/.cache/kernels /home/paravt/.cache/paravt
elif [ "$phase" = code ]; then
    # Dependencies are all in the layer below: install only paravt, with the backend installed there.
    $PIP install --no-deps --no-build-isolation /src
    # What the components and the entrypoint need, checked at build time rather than in the first pod.
    $PY -c "import kfp, paravt_core, torch, transformers"
    /opt/paravt/bin/paravt --help >/dev/null
    # The compilers Triton (every image) and SGLang (--sglang: the RL image) call at first use.
    $PY /src/images/toolchain_check.py "$@"
    # Configs travel with the image (recipes per stage), the source tree does not.
    mkdir -p /opt/paravt/share
    if [ -d /src/configs ]; then cp -r /src/configs /opt/paravt/share/configs; fi
    install -m 0755 /src/images/entrypoint.sh /opt/paravt/bin/paravt-entrypoint
    rm -rf /src
elif [ "$phase" = vllm ]; then
    # The eval image's optional vLLM server (Dockerfile.eval, build arg VLLM_VERSION): a venv of its own, as
    # vLLM pins its own torch; the eval stage starts it as engine.python=/opt/vllm/bin/python
    # (configs/eval/cluster.yaml). Empty version: nothing installed.
    version=${1:-}
    if [ -n "$version" ]; then
        python3.11 -m venv /opt/vllm
        /opt/vllm/bin/pip --no-cache-dir --disable-pip-version-check -q install "vllm==$version"
        /opt/vllm/bin/python -c "import vllm.entrypoints.openai.api_server"
    fi
else
    echo "install.sh: unknown phase '$phase' (deps, code or vllm)" >&2
    exit 2
fi
