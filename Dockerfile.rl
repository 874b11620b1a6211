# paravt-rl: the RL stage (PARA-GRPO; SGLang rollouts). Build from the repository root:
#   docker build -f Dockerfile.rl --build-arg VCS_REF=$(git rev-parse HEAD) -t paravt-rl:0.1.0 .
# BASE_IMAGE: a CUDA runtime image pinned by digest (any Debian/Ubuntu base with python3.11 works,
# e.g. a local debootstrap bookworm for CPU smoke builds). Stage recipes: /opt/paravt/share/configs.
ARG BASE_IMAGE=nvidia/cuda:13.0.0-runtime-ubuntu22.04@sha256:3e7f34f5e9dd5315b67ab30d71a92e578c5911236e14370647df020bdee2ca8a
FROM ${BASE_IMAGE}

# The venv first on PATH: `paravt` and the `python3` that KFP's lightweight components call.
ENV PATH=/opt/paravt/bin:$PATH \
    VIRTUAL_ENV=/opt/paravt \
    PYTHONUNBUFFERED=1

COPY . /src
RUN sh /src/images/install.sh --lock-override /src/images/rl-lock-overrides.txt -r /src/images/rl-requirements.txt

# Labels (and their build args) after the install: the expensive layer above is shared by images
# built from the same source, and a new commit does not invalidate it.
ARG PARAVT_VERSION=0.1.0
ARG VCS_REF=unknown
LABEL org.opencontainers.image.title="paravt-rl" \
      org.opencontainers.image.description="ParaVT RL stage (PARA-GRPO; SGLang rollouts)" \
      org.opencontainers.image.version="${PARAVT_VERSION}" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.licenses="Apache-2.0"

USER 10001:10001
WORKDIR /home/paravt
ENTRYPOINT ["paravt"]
CMD ["--help"]
