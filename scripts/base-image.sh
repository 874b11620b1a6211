#!/usr/bin/env bash
# The images' base: Debian 12 (bookworm) minbase made with debootstrap from the Debian archive, imported
# into podman, pushed to a registry, and printed as REGISTRY/paravt-base@sha256:… (what the Dockerfiles'
# BASE_IMAGE pins). No CUDA base image: torch's wheels bring the CUDA runtime, the RL image adds nvcc
# from the same pip metapackage, and libcuda comes from the node's driver (NVIDIA container toolkit).
# Why Debian 12: Python 3.11.2 and glibc 2.36 from the distribution (SGLang's wheel needs glibc >= 2.34;
# Ubuntu 22.04's only 3.11 is a release candidate, 24.04 has only 3.12).
#   scripts/base-image.sh [--push REGISTRY] [--tls-verify=false] [--pin]
#     (no --push)  build localhost/paravt-base:bookworm only
#     --push R     push it to R/paravt-base:bookworm and print R/paravt-base@sha256:<digest>
#     --pin        write that reference as BASE_IMAGE's default into Dockerfile.{sft,rl,eval}
# Moving the pinned image to another registry keeps its digest: skopeo copy
#   docker://R/paravt-base@sha256:<digest> docker://YOURS/paravt-base:bookworm (blobs copied as they are).
set -euo pipefail
cd "$(dirname "$0")/.."
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
LOCAL=localhost/paravt-base:$SUITE
WORK=${BASE_IMAGE_DIR:-build/base-image}
push="" tls=() pin=0
while [ $# -gt 0 ]; do
  case "$1" in
    --push) push=${2:?--push needs a registry, e.g. localhost:5055}; shift ;;
    --tls-verify=*) tls=("$1") ;;
    --pin) pin=1 ;;
    *) echo "usage: $0 [--push REGISTRY] [--tls-verify=false] [--pin]" >&2; exit 2 ;;
  esac
  shift
done
[ "$pin" = 0 ] || [ -n "$push" ] || { echo "base-image: --pin needs --push (a digest exists only once pushed)" >&2; exit 2; }

if ! podman image exists "$LOCAL"; then
  mkdir -p "$WORK"
  rm -rf "$WORK/rootfs"
  echo "base-image: debootstrap --variant=minbase $SUITE from $MIRROR" >&2
  debootstrap --variant=minbase "$SUITE" "$WORK/rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
  # The pockets Debian's own bookworm image lists: point releases and security fixes reach apt-get.
  cat >"$WORK/rootfs/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY $SUITE-security main
EOF
  # Nothing of the build host stays: apt lists and caches, logs, the machine id.
  rm -rf "$WORK/rootfs"/var/lib/apt/lists/* "$WORK/rootfs"/var/cache/apt/*.bin "$WORK/rootfs"/var/log/*.log
  : >"$WORK/rootfs/etc/machine-id"
  tar -C "$WORK/rootfs" --numeric-owner --sort=name -c . \
    | podman import --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' - "$LOCAL" >/dev/null
  rm -rf "$WORK/rootfs"
fi
echo "base-image: $LOCAL ($(podman image inspect --format '{{.Size}}' "$LOCAL") bytes)" >&2
[ -n "$push" ] || exit 0

mkdir -p "$WORK"
podman push -q "${tls[@]}" --digestfile "$WORK/digest" "$LOCAL" "docker://$push/paravt-base:$SUITE" >&2
ref="$push/paravt-base@$(cat "$WORK/digest")"
echo "$ref"
if [ "$pin" = 1 ]; then
  for fam in sft rl eval; do
    sed -i "s|^ARG BASE_IMAGE=.*|ARG BASE_IMAGE=$ref|" "Dockerfile.$fam"
  done
  echo "base-image: pinned BASE_IMAGE=$ref in Dockerfile.{sft,rl,eval}" >&2
fi
