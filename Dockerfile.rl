# paravt-rl: the RL stage (PARA-GRPO; SGLang rollouts). Build from the repository root:
#   docker build -f Dockerfile.rl --build-arg VCS_REF=$(git rev-parse HEAD) -t paravt-rl:0.1.0 .
# BASE_IMAGE (build arg): a CUDA runtime image pinned by digest (any Debian/Ubuntu base with python3.11 works,
# e.g. a local debootstrap bookworm for CPU smoke builds). Stage recipes: /opt/paravt/share/configs.
ARG BASE_IMAGE=docker.io/nvidia/cuda:13.0.0-runtime-ubuntu22.04@sha256:3e7f34f5e9dd5315b67ab30d71a92e578c5911236e14370647df020bdee2ca8a
FROM ${BASE_IMAGE}

# The venv first on PATH: `paravt` and the `python3` that KFP's lightweight components call.
ENV PATH=/opt/paravt/bin:$PATH \
    VIRTUAL_ENV=/opt/paravt \
    PYTHONUNBUFFERED=1

# Dependencies first: this layer depends only on pyproject.toml and the lock/requirement files, so
# a code edit reuses it (the expensive part, torch and CUDA libraries) and rebuilds from the COPYs below.
COPY pyproject.toml /src/pyproject.toml
COPY images/install.sh images/requirements.lock images/rl-requirements.txt images/rl-lock-overrides.txt /src/images/
RUN sh /src/images/install.sh deps --lock-override /src/images/rl-lock-overrides.txt -r /src/images/rl-requirements.txt

# Then the code (and the entrypoint script): installed without dependency resolution.
COPY README.md /src/README.md
COPY images/entrypoint.sh /src/images/entrypoint.sh
COPY paravt_core /src/paravt_core
COPY components /src/components
COPY pipelines /src/pipelines
COPY configs /src/configs
RUN sh /src/images/install.sh code

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
