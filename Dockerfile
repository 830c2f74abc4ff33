# gpu-enricher: a small runtime image (python:3.11-slim). The build stage turns the project and
# its dependencies into wheels; the install stage installs them from there into /install, without
# compilers, network access or a build cache; the runtime stage copies only what was installed.
# NVML (libnvidia-ml.so.1) is not in the image: the NVIDIA Container Toolkit mounts the host's
# driver library (NVIDIA_DRIVER_CAPABILITIES=utility).
#
# No `# syntax=` line and no `RUN --mount`: the file builds with Docker 20.10's classic builder
# (Debian's docker.io) as with BuildKit, and on builders that cannot fetch a frontend image
# (air-gapped) (issue 34).
#
#   docker build -t gpu-enricher:0.1.0 .
#   docker run --rm --gpus all -p 9400:9400 gpu-enricher:0.1.0
#   docker run --rm -p 9400:9400 gpu-enricher:0.1.0 --simulate      # no GPU needed

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
# Only what building the wheel needs (README.md is the package's long description).
COPY pyproject.toml README.md ./
COPY src ./src
# Every dependency ships manylinux wheels for CPython 3.11 (x86_64 and aarch64): --only-binary
# makes a missing one fail here instead of silently needing a compiler.
RUN python -m pip wheel --wheel-dir /wheels --only-binary=:all: --no-binary=gpu-enricher .

FROM ${PYTHON_IMAGE} AS install
COPY --from=build /wheels /wheels
RUN python -m pip install --no-cache-dir --no-index --find-links=/wheels --prefix=/install \
    gpu-enricher

FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="gpu-enricher" \
      org.opencontainers.image.description="NVIDIA GPU metrics in dcgm-exporter's format, with Kubernetes pod attribution" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11-slim-bookworm"
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# What the install stage installed, where the image's Python looks (its wheels stay behind).
COPY --from=install /install /usr/local
RUN gpu-enricher --version
# Root: the kubelet's pod-resources socket is root-owned. No capability is needed (the Helm
# chart drops them all and runs with a read-only root filesystem).
EXPOSE 9400
ENTRYPOINT ["gpu-enricher"]
