# paravt-rl: the RL stage (PARA-GRPO; SGLang rollouts). Build from the repository root:
#   docker build -f Dockerfile.rl --build-arg VCS_REF=$(git rev-parse HEAD) -t paravt-rl:0.1.0 .
# BASE_IMAGE (build arg): Debian 12 minbase from scripts/base-image.sh (debootstrap), pinned by digest. No CUDA
# base image: torch's wheels bring the CUDA runtime, libcuda comes from the node's driver (NVIDIA container
# toolkit or the cluster's driver mount). Stage recipes: /opt/paravt/share/configs.
ARG BASE_IMAGE=localhost:5055/paravt-base@sha256:c7a9c762902a84a9cf6d51b26edc1faf3546d6574feecd332738d61736b3bf90
FROM ${BASE_IMAGE}

# The venv first on PATH: `paravt` and the `python3` that KFP's lightweight components call.
# CUDA_HOME: the pip wheels' CUDA root (runtime and headers; nvcc in the RL image), its bin on PATH.
# NVIDIA_*: what the container toolkit mounts (compute, nvidia-smi) and the CUDA version the driver must
# support (torch's cuda-toolkit 13.0: an older driver is refused at container start, not at first kernel).
# /usr/local/nvidia: where managed clusters (GKE and others) mount the driver's libraries and tools.
ENV PATH=/opt/paravt/bin:/opt/paravt/lib/python3.11/site-packages/nvidia/cu13/bin:/usr/local/nvidia/bin:$PATH \
    VIRTUAL_ENV=/opt/paravt \
    PYTHONUNBUFFERED=1 \
    CUDA_HOME=/opt/paravt/lib/python3.11/site-packages/nvidia/cu13 \
    LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    NVIDIA_REQUIRE_CUDA=cuda>=13.0

# Dependencies first: this layer depends only on pyproject.toml and the lock/requirement files, so
# a code edit reuses it (the expensive part, torch and CUDA libraries) and rebuilds from the COPYs below.
COPY pyproject.toml /src/pyproject.toml
COPY images/install.sh images/requirements.lock images/rl-requirements.txt images/rl-lock-overrides.txt /src/images/
RUN sh /src/images/install.sh deps --lock-override /src/images/rl-lock-overrides.txt -r /src/images/rl-requirements.txt

# Then the code (and the entrypoint script): installed without dependency resolution.
COPY README.md /src/README.md
COPY images/entrypoint.sh images/toolchain_check.py /src/images/
COPY paravt_core /src/paravt_core
COPY components /src/components
COPY pipelines /src/pipelines
COPY configs /src/configs
RUN sh /src/images/install.sh code --sglang

# Labels (and their build args) last: a new commit (VCS_REF) invalidates nothing above.
ARG PARAVT_VERSION=0.1.0
ARG VCS_REF=unknown
LABEL org.opencontainers.image.title="paravt-rl" \
      org.opencontainers.image.description="ParaVT RL stage (PARA-GRPO; SGLang rollouts)" \
      org.opencontainers.image.version="${PARAVT_VERSION}" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.licenses="Apache-2.0"

USER 10001:10001
WORKDIR /home/paravt
# Accepts `IMAGE data --config …`, `IMAGE paravt data …` and `IMAGE python3 …` (images/entrypoint.sh).
ENTRYPOINT ["/opt/paravt/bin/paravt-entrypoint"]
CMD ["--help"]
